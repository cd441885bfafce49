/* The GPT family's Hugging Face form (loom/hf_map.h): GPT-2, Llama, Qwen2 and Qwen3.
 *
 * Every conversion is a per-parameter index map between a loom tensor and Hugging Face tensors:
 * transposes for GPT-2's Conv1D weights, the qkv regrouping (loom keeps each key/value head next
 * to the query heads that share it), SwiGLU's [gate | up] stacking, and the vocabulary padding
 * (padded rows are zero on import and dropped on export).
 *
 * Llama-style models with query-key normalisation (qk_layernorm, RMSNorm) are Qwen3's form:
 * model_type "qwen3", the per-head norms' weights self_attn.q_norm.weight and k_norm.weight [HS]
 * (Megatron's self_attention.q_layernorm / k_layernorm), head_dim written out (Qwen3's default is
 * 128, not hidden / heads). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/hf_map.h"
#include "loom/safetensors.h"
#include "loom/settings.h"
#include "models/gpt/gpt_hf.h"
#include "models/gpt/gpt_internal.h"
#include "models/gpt/gpt_settings.h"

enum arch { ARCH_GPT2, ARCH_LLAMA };

/* ---- Hugging Face names ---- */
struct hf_ctx {
    enum arch arch;
    const struct loom_transformer_config *cfg;
    const char *prefix; /* "" or "transformer." (GPT-2 import) */
};

static void hf_name(const struct hf_ctx *h, char *out, size_t cap, int64_t layer, const char *suffix) {
    if (layer >= 0)
        snprintf(out, cap, "%s%s%lld.%s", h->prefix, h->arch == ARCH_GPT2 ? "h." : "model.layers.",
                 (long long)layer, suffix);
    else
        snprintf(out, cap, "%s%s", h->prefix, suffix);
}

/* Fill the element map for loom parameter `p`. Returns the source index and flat index of each
 * loom element through `locate`. */
static int locate(const struct hf_ctx *h, const struct loom_param *p, const char *local,
                  int64_t row, int64_t col, int64_t *flat) {
    const struct loom_transformer_config *c = h->cfg;
    int64_t C = c->hidden, HS = loom_gpt_head_size(c), F = c->ffn_hidden;
    int gpt2 = h->arch == ARCH_GPT2;
    if (!strcmp(local, "embedding.word_embeddings.weight") || !strcmp(local, "output_layer.weight")) {
        if (row >= c->vocab_size) return -1;
        *flat = row * C + col;
        return 0;
    }
    if (!strcmp(local, "self_attention.linear_qkv.weight") || !strcmp(local, "self_attention.linear_qkv.bias")) {
        int part;
        int64_t head, d;
        loom_gpt_qkv_row(c, row, &part, &head, &d);
        int is_bias = p->ndim == 1;
        if (gpt2) {
            int64_t out = part * C + head * HS + d; /* c_attn output column */
            *flat = is_bias ? out : col * 3 * C + out;
            return 0;
        }
        int64_t r = head * HS + d;
        *flat = is_bias ? r : r * C + col;
        return part;
    }
    if (gpt2 && (!strcmp(local, "self_attention.linear_proj.weight") ||
                 !strcmp(local, "mlp.linear_fc1.weight") || !strcmp(local, "mlp.linear_fc2.weight"))) {
        /* Conv1D [in, out] = transpose of loom's [out, in] */
        *flat = col * p->shape[0] + row;
        return 0;
    }
    if (!gpt2 && !strcmp(local, "mlp.linear_fc1.weight")) {
        /* [gate | up] */
        *flat = (row % F) * C + col;
        return row < F ? 0 : 1;
    }
    *flat = p->ndim == 1 ? row : row * p->shape[1] + col;
    return 0;
}

/* Names and shapes of the HF tensors behind loom parameter `p`. */
static enum loom_status sources(const struct hf_ctx *h, const struct loom_param *p,
                                const char **local_out, struct loom_hf_sources *sm) {
    const struct loom_transformer_config *c = h->cfg;
    int64_t C = c->hidden, HS = loom_gpt_head_size(c), NH = c->heads, NKV = c->query_groups;
    int64_t F = c->ffn_hidden, V = c->vocab_size;
    int gpt2 = h->arch == ARCH_GPT2;
    memset(sm, 0, sizeof *sm);
    sm->n = 1;
    const char *local = p->name;
    int64_t layer = -1;
    if (!strncmp(p->name, "decoder.layers.", 15)) {
        layer = strtoll(p->name + 15, NULL, 10);
        local = strchr(p->name + 15, '.') + 1;
    }
    *local_out = local;
#define SRC(i, suffix, d0, d1)                                                                    \
    do {                                                                                          \
        hf_name(h, sm->name[i], sizeof sm->name[i], layer, suffix);                               \
        sm->shape[i][0] = (d0);                                                                   \
        sm->shape[i][1] = (d1);                                                                   \
    } while (0)
    if (!strcmp(p->name, "embedding.word_embeddings.weight"))
        SRC(0, gpt2 ? "wte.weight" : "model.embed_tokens.weight", V, C);
    else if (!strcmp(p->name, "embedding.position_embeddings.weight"))
        SRC(0, "wpe.weight", c->max_positions, C);
    else if (!strcmp(p->name, "decoder.final_layernorm.weight"))
        SRC(0, gpt2 ? "ln_f.weight" : "model.norm.weight", C, 0);
    else if (!strcmp(p->name, "decoder.final_layernorm.bias"))
        SRC(0, "ln_f.bias", C, 0);
    else if (!strcmp(p->name, "output_layer.weight"))
        SRC(0, "lm_head.weight", V, C);
    else if (!strcmp(local, "input_layernorm.weight"))
        SRC(0, gpt2 ? "ln_1.weight" : "input_layernorm.weight", C, 0);
    else if (!strcmp(local, "input_layernorm.bias"))
        SRC(0, "ln_1.bias", C, 0);
    else if (!strcmp(local, "pre_mlp_layernorm.weight"))
        SRC(0, gpt2 ? "ln_2.weight" : "post_attention_layernorm.weight", C, 0);
    else if (!strcmp(local, "pre_mlp_layernorm.bias"))
        SRC(0, "ln_2.bias", C, 0);
    else if (!gpt2 && !strcmp(local, "self_attention.q_layernorm.weight"))
        SRC(0, "self_attn.q_norm.weight", HS, 0);
    else if (!gpt2 && !strcmp(local, "self_attention.k_layernorm.weight"))
        SRC(0, "self_attn.k_norm.weight", HS, 0);
    else if (!strcmp(local, "self_attention.linear_qkv.weight")) {
        if (gpt2)
            SRC(0, "attn.c_attn.weight", C, 3 * C);
        else {
            SRC(0, "self_attn.q_proj.weight", NH * HS, C);
            SRC(1, "self_attn.k_proj.weight", NKV * HS, C);
            SRC(2, "self_attn.v_proj.weight", NKV * HS, C);
            sm->n = 3;
        }
    } else if (!strcmp(local, "self_attention.linear_qkv.bias")) {
        if (gpt2)
            SRC(0, "attn.c_attn.bias", 3 * C, 0);
        else {
            SRC(0, "self_attn.q_proj.bias", NH * HS, 0);
            SRC(1, "self_attn.k_proj.bias", NKV * HS, 0);
            SRC(2, "self_attn.v_proj.bias", NKV * HS, 0);
            sm->n = 3;
        }
    } else if (!strcmp(local, "self_attention.linear_proj.weight"))
        { if (gpt2) SRC(0, "attn.c_proj.weight", NH * HS, C); else SRC(0, "self_attn.o_proj.weight", C, NH * HS); }
    else if (!strcmp(local, "self_attention.linear_proj.bias"))
        { if (gpt2) SRC(0, "attn.c_proj.bias", C, 0); else SRC(0, "self_attn.o_proj.bias", C, 0); }
    else if (!strcmp(local, "mlp.linear_fc1.weight")) {
        if (gpt2)
            SRC(0, "mlp.c_fc.weight", C, F);
        else {
            SRC(0, "mlp.gate_proj.weight", F, C);
            SRC(1, "mlp.up_proj.weight", F, C);
            sm->n = 2;
        }
    } else if (!strcmp(local, "mlp.linear_fc1.bias"))
        SRC(0, "mlp.c_fc.bias", F, 0);
    else if (!strcmp(local, "mlp.linear_fc2.weight"))
        { if (gpt2) SRC(0, "mlp.c_proj.weight", F, C); else SRC(0, "mlp.down_proj.weight", C, F); }
    else if (!strcmp(local, "mlp.linear_fc2.bias"))
        SRC(0, "mlp.c_proj.bias", C, 0);
    else
        return loom_fail(LOOM_ERR_UNSUPPORTED, "parameter %s has no Hugging Face counterpart",
                         p->name);
#undef SRC
    return LOOM_OK;
}

/* ---- configurations ---- */
static enum loom_status json_int(json_t *o, const char *key, int64_t *out, int64_t dflt,
                                 const char *file) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (dflt < 0) return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" is missing", file, key);
        *out = dflt;
        return LOOM_OK;
    }
    if (!json_is_integer(v)) return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" is not an integer", file, key);
    *out = (int64_t)json_integer_value(v);
    return LOOM_OK;
}
static double json_num(json_t *o, const char *key, double dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : dflt;
}
static int json_flag(json_t *o, const char *key, int dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* rope_scaling (rope_type, or the older key type) into c: "llama3" (Llama 3.1's rescaling) or
 * "linear" (positions divided by factor: the interpolation); absent, null or "default": none.
 * Other kinds (dynamic, yarn, longrope) are refused. */
static enum loom_status rope_scaling_of(json_t *o, const char *path, struct loom_transformer_config *c) {
    json_t *rs = json_object_get(o, "rope_scaling");
    if (!rs || json_is_null(rs)) return LOOM_OK;
    const char *kind = json_string_value(json_object_get(rs, "rope_type"));
    if (!kind) kind = json_string_value(json_object_get(rs, "type"));
    if (kind && !strcmp(kind, "default")) return LOOM_OK;
    if (kind && !strcmp(kind, "linear")) {
        json_t *v = json_object_get(rs, "factor");
        if (!json_is_number(v) || !(json_number_value(v) > 0))
            return loom_fail(LOOM_ERR_FORMAT,
                             "%s: rope_scaling \"factor\" of rope_type linear must be a positive "
                             "number",
                             path);
        c->rope_interpolation = json_number_value(v);
        return LOOM_OK;
    }
    if (!json_is_object(rs) || !kind || strcmp(kind, "llama3"))
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "%s: rope_scaling of rope_type \"%s\" is not supported (llama3 or "
                         "linear)",
                         path, kind ? kind : "(missing)");
    const char *keys[] = {"factor", "low_freq_factor", "high_freq_factor",
                          "original_max_position_embeddings"};
    double *vals[] = {&c->rope_factor, &c->rope_low_freq_factor, &c->rope_high_freq_factor,
                      &c->rope_original_max_positions};
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(rs, keys[i]);
        if (!json_is_number(v))
            return loom_fail(LOOM_ERR_FORMAT, "%s: rope_scaling \"%s\" missing or not a number",
                             path, keys[i]);
        *vals[i] = json_number_value(v);
    }
    if (!(c->rope_factor > 0))
        return loom_fail(LOOM_ERR_FORMAT, "%s: rope_scaling factor must be positive (got %g)", path,
                         c->rope_factor);
    return LOOM_OK;
}

/* GPT's config.json (gpt2, llama, qwen2, qwen3) into c */
static enum loom_status gpt_config_read(json_t *o, const char *path, const char *type,
                                        struct loom_transformer_config *c, struct loom_hf_form *form) {
    enum arch arch_v = ARCH_GPT2, *arch = &arch_v;
    enum loom_status s = LOOM_OK;
    loom_gpt_config_default(c);
    c->hidden_dropout = c->attention_dropout = 0.0;
    if (type && !strcmp(type, "gpt2")) {
        *arch = ARCH_GPT2;
        int64_t inner = 0;
        if ((s = loom_settings_hf_read(&loom_gpt_config_desc, LOOM_GPT_HF_GPT2, o, path, c)) ||
            (s = json_int(o, "n_inner", &inner, 0, path)))
            goto out;
        c->ffn_hidden = inner ? inner : 4 * c->hidden;
        c->query_groups = c->heads;
        /* Hugging Face's GPT-2 has no head_dim: its heads are n_embd / n_head wide */
        int64_t hd = 0;
        if ((s = json_int(o, "head_dim", &hd, 0, path))) goto out;
        if (hd != 0 && (c->heads < 1 || hd * c->heads != c->hidden)) {
            s = loom_fail(
                LOOM_ERR_UNSUPPORTED,
                "%s: head_dim %lld: GPT-2's heads are n_embd / n_head wide (%lld / %lld); "
                "another head size is not supported for gpt2",
                path, (long long)hd, (long long)c->hidden, (long long)c->heads);
            goto out;
        }
        c->seq_length = c->max_positions;
        const char *act = json_string_value(json_object_get(o, "activation_function"));
        /* the tanh GELU (HF's default for GPT-2), or the exact one ("gelu") */
        if (act && strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh") &&
            strcmp(act, "gelu")) {
            s = loom_fail(LOOM_ERR_UNSUPPORTED,
                          "%s: activation_function \"%s\" is not supported "
                          "(valid: gelu_new, gelu_pytorch_tanh, gelu)",
                          path, act);
            goto out;
        }
        c->gelu = act && !strcmp(act, "gelu") ? LOOM_GELU_ERF : LOOM_GELU_TANH;
        c->untie = !json_flag(o, "tie_word_embeddings", 1);
        if (c->untie) {
            s = loom_fail(LOOM_ERR_UNSUPPORTED, "%s: untied GPT-2 is not supported", path);
            goto out;
        }
    } else if (type &&
               (!strcmp(type, "llama") || !strcmp(type, "qwen3") || !strcmp(type, "qwen2"))) {
        *arch = ARCH_LLAMA;
        const int qwen3 = !strcmp(type, "qwen3"), qwen2 = !strcmp(type, "qwen2");
        c->qk_layernorm = qwen3; /* q_norm, k_norm */
        c->qkv_bias = qwen2;     /* q_proj, k_proj and v_proj with biases */
        /* num_key_value_heads absent: 0, which is num_attention_heads once finalized */
        if ((s = loom_settings_hf_read(&loom_gpt_config_desc, LOOM_GPT_HF_LLAMA, o, path, c)))
            goto out;
        /* the head size: head_dim where given (0: hidden_size / num_attention_heads, Llama's
         * default; Qwen3's is 128) */
        if ((s = json_int(o, "head_dim", &c->head_size, qwen3 ? 128 : 0, path))) goto out;
        if (json_object_get(o, "head_dim") && !json_is_null(json_object_get(o, "head_dim")) &&
            c->head_size < 1) {
            s = loom_fail(LOOM_ERR_FORMAT, "%s: head_dim must be positive (got %lld)", path,
                          (long long)c->head_size);
            goto out;
        }
        if ((qwen3 || qwen2) && json_flag(o, "use_sliding_window", 0)) {
            s = loom_fail(LOOM_ERR_UNSUPPORTED, "%s: use_sliding_window is not supported", path);
            goto out;
        }
        if (json_flag(o, "attention_bias", 0) || json_flag(o, "mlp_bias", 0)) {
            s = loom_fail(LOOM_ERR_UNSUPPORTED, "%s: Llama with attention_bias/mlp_bias is not supported", path);
            goto out;
        }
        if ((s = rope_scaling_of(o, path, c))) goto out;
        if (json_num(o, "partial_rotary_factor", 1.0) != 1.0) {
            s = loom_fail(LOOM_ERR_UNSUPPORTED,
                          "%s: partial_rotary_factor %g: %s rotates whole heads (1 only)", path,
                          json_num(o, "partial_rotary_factor", 1.0), type);
            goto out;
        }
        c->seq_length = c->max_positions;
        c->norm = LOOM_NORM_RMSNORM;
        c->swiglu = 1;
        c->posemb = LOOM_POSEMB_ROPE;
        c->bias = 0;
        c->untie = !json_flag(o, "tie_word_embeddings", 0);
    }
out:
    form->variant = (int)arch_v;
    return s;
}

/* GPT-2's weights may carry the prefix "transformer." (GPT2LMHeadModel's) */
static enum loom_status gpt_weights_read(const struct loom_safetensors *st,
                                         struct loom_transformer_config *c, struct loom_hf_form *form) {
    (void)c;
    if (form->variant == ARCH_GPT2 && !loom_safetensors_find(st, "wte.weight") &&
        loom_safetensors_find(st, "transformer.wte.weight"))
        form->prefix = "transformer.";
    return LOOM_OK;
}

/* Buffers that transformers' checkpoints may carry: GPT-2's causal masks, the rotary
 * frequencies (both derived from config.json) */
static int gpt_tensor_known(const struct loom_transformer_config *c,
                            const struct loom_hf_form *form, const char *name) {
    (void)c;
    (void)form;
    static const char *const tails[] = {".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq"};
    const size_t n = strlen(name);
    for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
        const size_t t = strlen(tails[i]);
        if (n > t && !strcmp(name + n - t, tails[i])) return 1;
    }
    return 0;
}

static enum loom_status arch_of(const struct loom_transformer_config *c, enum arch *arch) {
    if (c->moe.num_experts > 0)
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "this model has MoE layers (--num-experts %lld), which loom does not "
                         "convert to Hugging Face's form yet",
                         (long long)c->moe.num_experts);
    int gpt2 = c->norm == LOOM_NORM_LAYERNORM && !c->swiglu && c->posemb == LOOM_POSEMB_LEARNED &&
               c->bias && !c->untie && c->query_groups == c->heads;
    int llama = c->norm == LOOM_NORM_RMSNORM && c->swiglu && c->posemb == LOOM_POSEMB_ROPE && !c->bias;
    if (c->qk_layernorm && !llama) { /* name what this model has instead */
        char why[160] = "";
        const char *lacks[] = {
            c->norm != LOOM_NORM_RMSNORM ? "LayerNorm" : NULL, !c->swiglu ? "GELU" : NULL,
            c->posemb != LOOM_POSEMB_ROPE ? "no rope" : NULL, c->bias ? "biases" : NULL};
        for (size_t i = 0; i < sizeof lacks / sizeof lacks[0]; i++)
            if (lacks[i])
                snprintf(why + strlen(why), sizeof why - strlen(why), "%s%s", *why ? ", " : "",
                         lacks[i]);
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "this model has no Hugging Face equivalent: query-key norms "
                         "(--qk-layernorm) export only as Qwen3, which needs RMSNorm, SwiGLU, rope "
                         "and no biases (this model: %s)",
                         why);
    }
    /* a qkv bias alone (--add-qkv-bias) is Qwen2's attention, which has no query-key norms */
    if (c->qkv_bias && !c->bias && (!llama || c->qk_layernorm))
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "this model has no Hugging Face equivalent: a qkv bias alone "
                         "(--add-qkv-bias) exports only as Qwen2, which needs RMSNorm, SwiGLU, "
                         "rope and no query-key norms");
    if (llama && c->rope_factor > 0 && c->rope_interpolation > 0)
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "this model has no Hugging Face equivalent: its rope_scaling is one kind, "
                         "Llama 3.1's (--use-rope-scaling) or linear "
                         "(--rotary-seq-len-interpolation-factor), not both");
    if (llama && c->rotary_percent != 1)
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "this model has no Hugging Face equivalent: its Llama rotates whole heads "
                         "(--rotary-percent %g)",
                         c->rotary_percent);
    if (gpt2) *arch = ARCH_GPT2;
    else if (llama) *arch = ARCH_LLAMA;
    else
        return loom_fail(LOOM_ERR_UNSUPPORTED, "this model has no Hugging Face equivalent: gpt2 "
                         "needs LayerNorm, GELU, learned positions, biases, tied embeddings and no "
                         "GQA; llama needs RMSNorm, SwiGLU, rope and no biases");
    /* Hugging Face's GPT-2 has no head_dim: its heads are n_embd / n_head wide */
    const int64_t hs = loom_gpt_head_size(c);
    if (gpt2 && hs * c->heads != c->hidden)
        return loom_fail(
            LOOM_ERR_UNSUPPORTED,
            "head size %lld (--kv-channels): Hugging Face's GPT-2 has no head_dim, its heads "
            "are hidden / heads = %lld / %lld wide; only a Llama-style model (RMSNorm, SwiGLU, "
            "rope, no biases) exports another head size",
            (long long)hs, (long long)c->hidden, (long long)c->heads);
    return LOOM_OK;
}

static enum loom_status gpt_export_check(const struct loom_transformer_config *c,
                                         struct loom_hf_form *form) {
    enum arch arch = ARCH_GPT2;
    LOOM_CHECK(arch_of(c, &arch));
    form->variant = (int)arch;
    return LOOM_OK;
}

static void gpt_config_write(const struct loom_transformer_config *c, const struct loom_hf_form *form,
                             json_t *o) {
    const enum arch arch = (enum arch)form->variant;
    if (arch == ARCH_GPT2) {
        json_object_set_new(o, "model_type", json_string("gpt2"));
        json_object_set_new(o, "architectures", json_pack("[s]", "GPT2LMHeadModel"));
        json_object_set_new(o, "n_ctx", json_integer(c->max_positions));
        json_object_set_new(o, "n_inner", c->ffn_hidden == 4 * c->hidden ? json_null() : json_integer(c->ffn_hidden));
        json_object_set_new(o, "activation_function",
                            json_string(c->gelu == LOOM_GELU_ERF ? "gelu" : "gelu_new"));
        json_object_set_new(o, "embd_pdrop", json_real(c->hidden_dropout));
        json_object_set_new(o, "tie_word_embeddings", json_true());
    } else {
        /* Llama with q_norm and k_norm: Qwen3; with q/k/v biases: Qwen2 */
        const int qwen3 = c->qk_layernorm, qwen2 = c->qkv_bias;
        json_object_set_new(o, "model_type",
                            json_string(qwen3   ? "qwen3"
                                        : qwen2 ? "qwen2"
                                                : "llama"));
        json_object_set_new(o, "architectures",
                            json_pack("[s]", qwen3   ? "Qwen3ForCausalLM"
                                             : qwen2 ? "Qwen2ForCausalLM"
                                                     : "LlamaForCausalLM"));
        if (qwen2 || qwen3) json_object_set_new(o, "use_sliding_window", json_false());
        if (qwen3) json_object_set_new(o, "head_dim", json_integer(loom_gpt_head_size(c)));
        if (c->rope_factor > 0) { /* Llama 3.1's */
            json_t *rs = json_object();
            json_object_set_new(rs, "rope_type", json_string("llama3"));
            json_object_set_new(rs, "factor", json_real(c->rope_factor));
            json_object_set_new(rs, "low_freq_factor", json_real(c->rope_low_freq_factor));
            json_object_set_new(rs, "high_freq_factor", json_real(c->rope_high_freq_factor));
            json_object_set_new(rs, "original_max_position_embeddings",
                                json_integer((json_int_t)c->rope_original_max_positions));
            json_object_set_new(o, "rope_scaling", rs);
        } else if (c->rope_interpolation > 0) { /* positions interpolated */
            json_object_set_new(
                o, "rope_scaling",
                json_pack("{s:s, s:f}", "rope_type", "linear", "factor", c->rope_interpolation));
        } else {
            json_object_set_new(o, "rope_scaling", json_null());
        }
        /* the head size where it is not hidden_size / num_attention_heads (--kv-channels) */
        if (loom_gpt_head_size(c) * c->heads != c->hidden)
            json_object_set_new(o, "head_dim", json_integer(loom_gpt_head_size(c)));
        json_object_set_new(o, "hidden_act", json_string("silu"));
        json_object_set_new(o, "attention_bias", json_false());
        json_object_set_new(o, "mlp_bias", json_false());
        json_object_set_new(o, "tie_word_embeddings", json_boolean(!c->untie));
    }
    /* the settings with a plain key (loom_gpt_settings' hf[]) */
    loom_settings_hf_write(&loom_gpt_config_desc,
                           arch == ARCH_GPT2 ? LOOM_GPT_HF_GPT2 : LOOM_GPT_HF_LLAMA, c, o);
}

/* GPT's tensors: the parameter's name within its layer, and the hooks on hf_ctx */
static const char *layer_local(const struct loom_param *p) {
    return strncmp(p->name, "decoder.layers.", 15) ? p->name : strchr(p->name + 15, '.') + 1;
}
static enum loom_status gpt_sources(const struct loom_transformer_config *c,
                                    const struct loom_hf_form *form, const struct loom_param *p,
                                    struct loom_hf_sources *sm) {
    const struct hf_ctx h = {(enum arch)form->variant, c, form->prefix ? form->prefix : ""};
    const char *local;
    return sources(&h, p, &local, sm);
}
static int gpt_locate(const struct loom_transformer_config *c, const struct loom_hf_form *form,
                      const struct loom_param *p, int64_t row, int64_t col, int64_t *flat) {
    const struct hf_ctx h = {(enum arch)form->variant, c, form->prefix ? form->prefix : ""};
    return locate(&h, p, layer_local(p), row, col, flat);
}

static const char *const gpt_types[] = {"gpt2", "llama", "qwen2", "qwen3", NULL};
const struct loom_hf_map loom_gpt_hf_map = {
    .family = "gpt",
    .model_types = gpt_types,
    .config_read = gpt_config_read,
    .weights_read = gpt_weights_read,
    .tensor_known = gpt_tensor_known,
    .export_check = gpt_export_check,
    .config_write = gpt_config_write,
    .sources = gpt_sources,
    .locate = gpt_locate,
    .table = loom_gpt_hf_table,
};

/* The table of c on one rank, nothing allocated (the families on the transformer stack share
 * the table's builder) */
enum loom_status loom_gpt_hf_table(const struct loom_transformer_config *c,
                                   struct loom_param **params, int *nparams) {
    struct loom_parallel par;
    struct loom_gpt m;
    memset(&m, 0, sizeof m);
    m.cfg = *c;
    m.base.par = &par;
    LOOM_CHECK(loom_parallel_init_single(&par));
    enum loom_status s = loom_gpt_build_table(&m);
    loom_parallel_free(&par);
    if (s != LOOM_OK) {
        free(m.base.params);
        return s;
    }
    *params = m.base.params;
    *nparams = m.base.nparams;
    return LOOM_OK;
}
