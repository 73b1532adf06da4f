"""`python -m bench`: sweep ChatTTS configurations the way llama-bench does, keep every result."""
