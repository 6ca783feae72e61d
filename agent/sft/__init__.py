"""Supervised fine-tuning data from run folders: fix-it and kernel-generation examples, filters, data cards,
and teacher repairs mined through the repair loop."""
