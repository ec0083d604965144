"""Graphs: LLM-BP inference on text-attributed graphs (``llm_bp``)."""
