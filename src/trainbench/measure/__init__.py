"""What is the same for every model: timing, memory, stability, hardware description, the epoch loop."""
