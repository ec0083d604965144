"""Generative models: one-step GAN fine-tuning, spatial reasoning models, Orthus."""
