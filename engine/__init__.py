"""memloop engine package."""
