"""Prompt-injection detection: weighted rules over normalized and decoded text, plus an optional local classifier."""
