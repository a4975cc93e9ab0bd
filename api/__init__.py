"""Placeholder: this component arrives with a later issue (see README)."""
