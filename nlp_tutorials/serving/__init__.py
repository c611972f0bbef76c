"""Serving: a fine-tuned model exported as a TensorFlow SavedModel."""
