"""A toy third-party omnitensor backend (example): add, mul and exp on float32 with numpy."""
