"""Vision: FlexiReID mixture of experts (``flexireid``) and visual memory (``visual_memory``)."""
