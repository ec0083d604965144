"""Federated learning: clustered FL (``fedgwc``) and certified evaluation (``robust_dkw``)."""
