"""TF_CONFIG's task index is an integer: JSON's true is not worker 1."""
import json

import pytest

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.training.distribute import parse_tf_config

CLUSTER = {"worker": ["a:1", "b:1"]}


@pytest.mark.parametrize("index", [True, 1.0, "1"])
def test_a_task_index_that_is_no_integer_is_refused(index):
    with pytest.raises(UserError, match=r"TF_CONFIG task index .*: expected 0 to 1"):
        parse_tf_config(json.dumps({"cluster": CLUSTER, "task": {"type": "worker",
                                                                  "index": index}}))


def test_an_integer_index_is_read():
    config = parse_tf_config(json.dumps({"cluster": CLUSTER, "task": {"type": "worker",
                                                                       "index": 1}}))
    assert config["task"]["index"] == 1
