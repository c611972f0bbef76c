"""Training: the run settings, optimizer, checkpoints, tf.distribute, pre-training, fine-tuning,
continued pre-training and the date model's training."""
