"""Reinforcement learning: selective state-adaptive regularisation for offline RL (``ssar``)."""
