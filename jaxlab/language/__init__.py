"""Language: retrieval heads, SFT vs RL (``general_points``), CogFunSearch, TRUST-VLM."""
