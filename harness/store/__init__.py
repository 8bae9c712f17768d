"""Files: atomic writes (a killed run leaves no file a later step would trust), JSON lines, result records."""
