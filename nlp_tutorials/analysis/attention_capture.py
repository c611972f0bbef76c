"""The attention of a Transformer, GPT or BERT with the queries and keys that made it.

The explorer's neuron view draws each attention probability as a query · key product, so it needs
the vectors themselves, which the model does not return. :func:`attention_vectors` projects them
again from each attention layer's input (the layers keep nothing between calls:
models/layers.py), beside the probabilities the model's ``call`` returns.
"""


def attention_vectors(model, inputs) -> dict:
    """``model``'s attention probabilities for ``inputs`` and the queries and keys that made them.

    ``inputs`` as the model's ``call`` takes them: ``src_ids`` and ``tgt_ids`` for the
    encoder-decoder ``Transformer``, ``input_ids`` (and ``token_type_ids``) for GPT and BERT.
    Returns ``{"attentions", "queries", "keys"}``, each ``{stack name: [one tensor per layer]}``:
    probabilities [batch, heads, q_step, k_step], queries [batch, heads, q_step, head_size],
    keys [batch, heads, k_step, head_size] (inference mode).
    """
    if "src_ids" in inputs:
        return encoder_decoder_vectors(model, inputs)
    outputs = model(inputs, training=False)
    # Layer i reads hidden_states[i], the input ``call`` returns for it.
    pairs = list(zip(model.encoder.blocks, outputs["hidden_states"]))
    return {"attentions": outputs["attentions"],
            "queries": {"encoder": [block.attention.queries(x) for block, x in pairs]},
            "keys": {"encoder": [block.attention.project(x)["key"] for block, x in pairs]}}


def encoder_decoder_vectors(model, inputs) -> dict:
    """:func:`attention_vectors` of the encoder-decoder ``Transformer``: stacks ``encoder``,
    ``decoder`` and ``encoder_decoder``, each layer's inputs recomputed as its ``call`` does."""
    from nlp_tutorials.models.masks import padding_mask

    src_ids, tgt_ids = inputs["src_ids"], inputs["tgt_ids"]
    src_mask = padding_mask(src_ids, model.config.pad_token_id)  # [batch, 1, 1, s_step]
    encoded, enc_probs, _ = model.encoder(model.src_embeddings(src_ids), src_mask)
    memory = encoded[-1]  # [batch, s_step, hidden]
    vectors = {"queries": {"encoder": [], "decoder": [], "encoder_decoder": []},
               "keys": {"encoder": [], "decoder": [], "encoder_decoder": []}}
    for block, x in zip(model.encoder.blocks, encoded):
        add_vectors(vectors, "encoder", block.attention, x, x)
    x, self_mask = model.tgt_embeddings(tgt_ids), model.mask(tgt_ids)
    dec_probs, cross_probs = [], []
    for block in model.decoder.blocks:
        add_vectors(vectors, "decoder", block.self_attention, x, x)
        # The cross-attention reads the self-attention sub-layer's output.
        attended = block.self_attention(x, x, self_mask)[0]
        add_vectors(vectors, "encoder_decoder", block.cross_attention,
                    block.self_norm(x, attended), memory)
        x, self_probs, probs, _ = block(x, memory, self_mask, src_mask)
        dec_probs.append(self_probs)
        cross_probs.append(probs)
    vectors["attentions"] = {"encoder": enc_probs, "decoder": dec_probs,
                             "encoder_decoder": cross_probs}
    return vectors


def add_vectors(vectors, stack, attention, query_input, memory) -> None:
    """Append one attention layer's queries and keys (of its inputs) to ``vectors``' ``stack``."""
    vectors["queries"][stack].append(attention.queries(query_input))
    vectors["keys"][stack].append(attention.project(memory)["key"])
