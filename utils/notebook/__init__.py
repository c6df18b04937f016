"""What the notebooks and the web app show: widgets, markdown tables and the per-step view of decoding."""
