"""Textual dashboard over the engine's state (planned: see README)."""
