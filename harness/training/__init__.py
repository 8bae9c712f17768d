"""Training: one loop (``loop``), the drafter objectives (``objectives``), target features, what every drafter
trainer shares (``drafters``) and the default model zoo (``zoo``, ``zoo_training``)."""
