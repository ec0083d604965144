"""Games: auctions (approximate best response gradient) and convex Markov games."""
