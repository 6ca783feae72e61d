"""Supervised fine-tuning on exported repair data: reading it, training on it (TRL, PEFT), adding reasoning."""
