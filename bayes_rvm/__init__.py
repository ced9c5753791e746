"""bayes_rvm: the Relevance Vector Machine as a PyMC model, fitted by type-II maximum likelihood or MCMC."""
