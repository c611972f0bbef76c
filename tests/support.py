"""Small helpers several test files share (the tests' folder is on sys.path under pytest)."""
import socket


def free_ports(count: int) -> list[int]:
    """``count`` TCP ports on localhost that were free a moment ago (for local workers)."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def weights_by_path(model) -> dict:
    """The model's weights by their Keras path without the model's name, as checkpoints key them."""
    return {w.path.removeprefix(f"{model.name}/"): w.numpy() for w in model.weights}


def checkpoint_weights(prefix) -> dict:
    """The model weights a checkpoint holds, by Keras path (its keys spell "/" as ".S")."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    marker, suffix = "model/", "/.ATTRIBUTES/VARIABLE_VALUE"
    return {key[len(marker):-len(suffix)].replace(".S", "/"): reader.get_tensor(key)
            for key in reader.get_variable_to_shape_map()
            if key.startswith(marker) and key.endswith(suffix)}
