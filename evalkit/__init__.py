"""evalkit: an evaluation and replay harness for LLM agents.

Every model call and tool call of a mission lands in a recording, and every
verdict about a mission is re-derived from that recording alone.
"""

__version__ = "0.1.0"
