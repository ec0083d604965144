"""Control: neural event-triggered control (``neural_etc``)."""
