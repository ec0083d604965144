"""Statistical tests: conditional mean independence (``cmi_test``)."""
