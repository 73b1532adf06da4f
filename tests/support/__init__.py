"""What tests share besides fixtures: browser helpers, stand-in workers, the Ray CLI, espeak-ng speech."""
