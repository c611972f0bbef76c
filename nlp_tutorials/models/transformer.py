"""The Transformer (Vaswani et al., 2017) as a readable Keras model, and the family's base.

Run ``python -m nlp_tutorials.transformer train`` to teach it to translate dates.

:class:`Transformer` stacks the layers of :mod:`nlp_tutorials.models.layers` into the
encoder-decoder; ``GPT`` and ``BERT`` build on it. Its methods are the family's contract:
``call``, ``mask``, ``start_cache``/``decode_step`` and ``step`` keep one signature and one
meaning whichever model runs them. What is not the lesson sits beside it: HuggingFace's interface
in :mod:`~nlp_tutorials.models.huggingface`, head pruning in :mod:`~nlp_tutorials.models.pruning`,
the queries and keys the explorer draws in :mod:`nlp_tutorials.analysis.attention_capture`.
"""
import keras
import tensorflow as tf

from nlp_tutorials.models.config import ModelConfig
from nlp_tutorials.models.layers import Decoder, Embeddings, Encoder, truncated_normal
from nlp_tutorials.models.losses import sparse_cross_entropy
from nlp_tutorials.models.masks import cached_causal_mask, causal_mask, padding_mask
from nlp_tutorials.models.trainable import TrainableModel


@keras.saving.register_keras_serializable(package="nlp_tutorials")
class Transformer(TrainableModel):
    """Encoder-decoder Transformer for sequence-to-sequence tasks, and the family's base class.

    What every model of the family shares, and keeps the meaning of when it overrides it:

    - ``Transformer(config)`` builds its layers (:meth:`build_layers`) and every weight
      (:meth:`build_weights`); ``get_config``/``from_config`` round-trip the config;
    - ``call(inputs, training)``: a dict of [batch, step] tensors in, a dict out, with
      ``attentions``: ``{stack name: [one [batch, heads, q_step, k_step] tensor per layer]}``;
    - :meth:`mask`: the additive self-attention mask of a stack that reads ``ids``;
    - :meth:`step`: one optimisation step on a batch dict (``TrainableModel`` compiles it and
      runs it under Keras' ``fit``);
    - :meth:`start_cache` / :meth:`decode_step`: generation one token at a time.

    Here, ``call`` takes ``src_ids`` [batch, s_step] and ``tgt_ids`` [batch, t_step] (the
    decoder input, starting with a start token) and returns ``logits`` [batch, t_step,
    target_vocab] and the ``encoder``, ``decoder`` and ``encoder_decoder`` attentions.
    Example (the decoder's first self-attention, layer 0 of sequence 0, head 0, is causal)::

        >>> from nlp_tutorials.models.config import ModelConfig
        >>> model = Transformer(ModelConfig("transformer", vocab_size=20, hidden_size=8,
        ...     num_hidden_layers=2, num_attention_heads=2, intermediate_size=16))
        >>> out = model({"src_ids": tf.constant([[5, 6, 7]]), "tgt_ids": tf.constant([[1, 5, 6]])})
        >>> out["logits"].shape
        TensorShape([1, 3, 20])
        >>> (out["attentions"]["decoder"][0][0, 0] > 0).numpy().astype(int)
        array([[1, 0, 0],
               [1, 1, 0],
               [1, 1, 1]])
    """

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.build_layers()
        self.build_weights()

    def build(self, input_shape=None):
        # Sub-layers create their weights on their first call; build_weights() makes that call.
        self.built = True

    def build_layers(self):
        """Create the sub-layers (their weights come with the first call)."""
        config = self.config
        target_vocab = config.target_vocab_size or config.vocab_size
        self.src_embeddings = Embeddings(config, config.vocab_size, False, name="src_embeddings")
        self.tgt_embeddings = Embeddings(config, target_vocab, False, name="tgt_embeddings")
        self.encoder = Encoder(config, name="encoder")
        self.decoder = Decoder(config, name="decoder")
        self.output_layer = keras.layers.Dense(
            target_vocab, kernel_initializer=truncated_normal(config), name="output_layer")

    def build_weights(self):
        """Create every weight by running a tiny input, so the model saves and loads at once."""
        ids = tf.constant([[1, 1]], tf.int32)
        self({"src_ids": ids, "tgt_ids": ids}, training=False)

    def mask(self, ids, attention_mask=None):
        """Causal: position i attends to real tokens at positions <= i. [batch, 1, step, step]

        This is the decoder's mask (it must not see the tokens it is about to predict); the
        encoder reads the whole source, so it takes :func:`padding_mask` instead. Real tokens
        are those not equal to ``pad_token_id``, or where ``attention_mask`` [batch, step] is 1
        when it is given.
        """
        return causal_mask(ids, self.config.pad_token_id, attention_mask)

    def call(self, inputs, training=False):
        src_ids, tgt_ids = inputs["src_ids"], inputs["tgt_ids"]
        src_mask = padding_mask(src_ids, self.config.pad_token_id)  # [batch, 1, 1, s_step]
        encoded, enc_probs, _ = self.encoder(self.src_embeddings(src_ids, training=training),
                                             src_mask, training=training)
        memory = encoded[-1]  # [batch, s_step, hidden]
        x, dec_probs, cross_probs, _ = self.decoder(
            self.tgt_embeddings(tgt_ids, training=training), memory, self.mask(tgt_ids),
            src_mask, training=training)
        return {"logits": self.output_layer(x),  # [batch, t_step, target_vocab]
                "attentions": {"encoder": enc_probs, "decoder": dec_probs,
                               "encoder_decoder": cross_probs}}

    def start_cache(self, inputs):
        """The state decoding starts from, for the batch of ``inputs`` (a dict as ``call``'s).

        Here ``inputs["src_ids"]`` [batch, s_step] is encoded once; the cache holds the source
        mask and, per decoder layer, an empty self-attention cache and the cross-attention keys
        and values of the encoder output.
        """
        src_ids = inputs["src_ids"]
        src_mask = padding_mask(src_ids, self.config.pad_token_id)  # [batch, 1, 1, s_step]
        memory = self.encoder(self.src_embeddings(src_ids), src_mask)[0][-1]
        batch = tf.shape(src_ids)[0]
        layers = [{"self": block.self_attention.empty_cache(batch),
                   "cross": block.cross_attention.project(memory)}
                  for block in self.decoder.blocks]
        return {"src_mask": src_mask, "layers": layers}

    def decode_step(self, ids, cache):
        """Feed ids [batch, new] that follow the cached positions (inference only).

        Returns (logits [batch, new, vocab], the cache with these positions added). The logits
        equal those of a full ``call`` on the whole prefix (no padding in it).
        """
        past = tf.shape(cache["layers"][0]["self"]["key"])[2]
        x = self.tgt_embeddings(ids, start=past)  # [batch, new, hidden]
        self_mask = cached_causal_mask(past, tf.shape(ids)[1])
        x, _, _, layers = self.decoder(x, None, self_mask, cache["src_mask"], cache=cache["layers"])
        return self.output_layer(x), {"src_mask": cache["src_mask"], "layers": layers}

    def step(self, batch, training=True):
        """One optimisation step of teacher-forced next-token loss on the target.

        ``batch``: ``src_ids`` [batch, s_step], ``tgt_ids`` [batch, t_step] (start token first).
        The decoder reads ``tgt_ids[:, :-1]`` and predicts ``tgt_ids[:, 1:]``; padding is
        ignored. ``training=False`` only evaluates. Returns scalar metrics: loss,
        token_accuracy.
        """
        tgt_in, tgt_out = batch["tgt_ids"][:, :-1], batch["tgt_ids"][:, 1:]
        with tf.GradientTape() as tape:
            outputs = self({"src_ids": batch["src_ids"], "tgt_ids": tgt_in}, training=training)
            weights = tf.not_equal(tgt_out, self.config.pad_token_id)
            loss, accuracy = sparse_cross_entropy(tgt_out, outputs["logits"], weights)
        if training:
            self.apply_gradients(tape, loss)
        return {"loss": loss, "token_accuracy": accuracy}

    def get_config(self):
        return {"config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        return cls(ModelConfig.from_dict(config["config"]))
