"""Tests of the model layer (pitrio.providers)."""
