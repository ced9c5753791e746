"""bayes_rvm: the Relevance Vector Machine as a PyMC model (type-II maximum likelihood or MCMC)."""
