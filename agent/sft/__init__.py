"""Supervised fine-tuning from run folders: fix-it and kernel-generation examples, filters, data cards, teacher
repairs mined through the repair loop; and using that data: reasoning synthesis and LoRA training (TRL, PEFT)."""
