"""Probabilistic models: GP-prior VAE (``gp_vae``), multi-view probabilistic slots."""
