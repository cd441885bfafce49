/* BERT's Hugging Face form: MegatronBertForPreTraining (model_type "megatron-bert"), and the same
 * without bert.pooler.* and cls.seq_relationship.* (MegatronBertForMaskedLM's tensors) as the
 * model without the binary head. The mapping `loom convert` takes (loom/hf_map.h):
 *
 *   bert.embeddings.word_embeddings.weight [V, H]      embedding.word_embeddings.weight [Vp, H]
 *                                                      (tied output; padded rows zero)
 *   bert.embeddings.position_embeddings.weight         embedding.position_embeddings.weight
 *   bert.embeddings.token_type_embeddings.weight [2,H] embedding.tokentype_embeddings.weight
 *   bert.encoder.layer.{i}.attention.ln.*              encoder.layers.{i}.input_layernorm.*
 *     .attention.self.{query,key,value}.*              .self_attention.linear_qkv.* (Megatron's
 *                                                      rows: per group q heads, k, v)
 *     .attention.output.dense.*                        .self_attention.linear_proj.*
 *     .ln.*                                            .pre_mlp_layernorm.*
 *     .intermediate.dense.*                            .mlp.linear_fc1.*
 *     .output.dense.*                                  .mlp.linear_fc2.*
 *   bert.encoder.ln.*                                  encoder.final_layernorm.*
 *   cls.predictions.transform.dense.*                  lm_head.dense.*
 *   cls.predictions.transform.LayerNorm.*              lm_head.layer_norm.*
 *   cls.predictions.bias [V]                           output_layer.bias [Vp] (padded rows zero)
 *   bert.pooler.dense.*                                pooler.dense.*        (binary head only)
 *   cls.seq_relationship.* [2, H], [2]                 binary_head.*         (binary head only)
 *
 * cls.predictions.decoder.weight / .bias are the word embedding and cls.predictions.bias (tied):
 * taken when equal bit for bit, never written. config.json's hidden_act is both the MLP's and the
 * LM head's GELU: "gelu" the exact (erf) form, "gelu_new" / "gelu_pytorch_tanh" / "gelu_fast" the
 * tanh form. Hugging Face's post-LN BERT (model_type "bert") is another model and is refused. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/bert.h"
#include "loom/hf_map.h"
#include "loom/safetensors.h"
#include "models/gpt/gpt_hf.h"

/* HF MegatronBertConfig's defaults for the keys it may leave out */
#define HF_MAX_POSITIONS 512
#define HF_LAYER_NORM_EPS 1e-12
#define HF_DROPOUT 0.1
#define HF_INIT_RANGE 0.02

/* ---- config.json ---- */
static enum loom_status get_int(json_t *o, const char *path, const char *key, int required,
                                int64_t dflt, int64_t *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" is missing", path, key);
        *out = dflt;
        return LOOM_OK;
    }
    if (!json_is_integer(v))
        return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" is not an integer", path, key);
    *out = (int64_t)json_integer_value(v);
    return LOOM_OK;
}

static enum loom_status get_num(json_t *o, const char *path, const char *key, double dflt,
                                double *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return LOOM_OK;
    }
    if (!json_is_number(v))
        return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" is not a number", path, key);
    *out = json_number_value(v);
    return LOOM_OK;
}

static enum loom_status bert_config_read(json_t *o, const char *path, const char *type,
                                         struct loom_transformer_config *c, struct loom_hf_form *form) {
    if (strcmp(type, "megatron-bert"))
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "%s: model_type \"%s\" is Hugging Face's post-LN BERT; loom's BERT is "
                         "Megatron-LM's pre-LN one, model_type \"megatron-bert\"",
                         path, type);
    form->variant = 0;
    loom_gpt_config_default(c);
    const struct {
        const char *key;
        int64_t *field;
        int required;
        int64_t dflt;
    } ints[] = {
        {"vocab_size", &c->vocab_size, 1, 0},
        {"hidden_size", &c->hidden, 1, 0},
        {"num_hidden_layers", &c->num_layers, 1, 0},
        {"num_attention_heads", &c->heads, 1, 0},
        {"intermediate_size", &c->ffn_hidden, 1, 0},
        {"max_position_embeddings", &c->max_positions, 0, HF_MAX_POSITIONS},
        {"type_vocab_size", &c->num_tokentypes, 0, 2},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        LOOM_CHECK(get_int(o, path, ints[i].key, ints[i].required, ints[i].dflt, ints[i].field));
    if (c->num_tokentypes != 2)
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "%s: type_vocab_size %lld: loom's BERT has 2 token types (segments A "
                         "and B)",
                         path, (long long)c->num_tokentypes);
    LOOM_CHECK(get_num(o, path, "layer_norm_eps", HF_LAYER_NORM_EPS, &c->norm_eps));
    LOOM_CHECK(get_num(o, path, "hidden_dropout_prob", HF_DROPOUT, &c->hidden_dropout));
    LOOM_CHECK(
        get_num(o, path, "attention_probs_dropout_prob", HF_DROPOUT, &c->attention_dropout));
    LOOM_CHECK(get_num(o, path, "initializer_range", HF_INIT_RANGE, &c->init_std));

    json_t *act_v = json_object_get(o, "hidden_act");
    const char *act = act_v ? json_string_value(act_v) : "gelu";
    if (!act || (strcmp(act, "gelu") && strcmp(act, "gelu_new") &&
                 strcmp(act, "gelu_pytorch_tanh") && strcmp(act, "gelu_fast")))
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "%s: hidden_act %s is not supported (valid: gelu, gelu_new, "
                         "gelu_pytorch_tanh, gelu_fast)",
                         path, act ? act : "(not a string)");
    c->gelu = c->head_gelu = !strcmp(act, "gelu") ? LOOM_GELU_ERF : LOOM_GELU_TANH;

    const char *pe = json_string_value(json_object_get(o, "position_embedding_type"));
    if (pe && strcmp(pe, "absolute"))
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "%s: position_embedding_type \"%s\" is not supported (absolute only)",
                         path, pe);
    json_t *tie = json_object_get(o, "tie_word_embeddings");
    if (json_is_boolean(tie) && !json_is_true(tie))
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "%s: tie_word_embeddings false: loom's BERT ties its output layer to the "
                         "word embedding",
                         path);
    if (json_is_true(json_object_get(o, "is_decoder")))
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "%s: is_decoder true: loom's BERT is an encoder (bidirectional)", path);

    c->seq_length = c->max_positions;
    c->query_groups = c->heads;
    c->head_size = 0;
    c->norm = LOOM_NORM_LAYERNORM;
    c->swiglu = 0;
    c->posemb = LOOM_POSEMB_LEARNED;
    c->bias = 1;
    c->untie = 0;
    c->encoder = 1;
    c->lm_head_transform = 1;
    c->output_bias = 1;
    c->binary_head = 1; /* bert_weights_read: whether the file has the head */
    return LOOM_OK;
}

static const char *gelu_act(enum loom_gelu g) { return g == LOOM_GELU_ERF ? "gelu" : "gelu_new"; }

static void bert_config_write(const struct loom_transformer_config *c, const struct loom_hf_form *form,
                              json_t *o) {
    (void)form;
    json_object_set_new(o, "model_type", json_string("megatron-bert"));
    json_object_set_new(o, "architectures",
                        json_pack("[s]", c->binary_head ? "MegatronBertForPreTraining"
                                                        : "MegatronBertForMaskedLM"));
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(o, "hidden_size", json_integer(c->hidden));
    json_object_set_new(o, "num_hidden_layers", json_integer(c->num_layers));
    json_object_set_new(o, "num_attention_heads", json_integer(c->heads));
    json_object_set_new(o, "intermediate_size", json_integer(c->ffn_hidden));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_positions));
    json_object_set_new(o, "type_vocab_size", json_integer(c->num_tokentypes));
    json_object_set_new(o, "layer_norm_eps", json_real(c->norm_eps));
    json_object_set_new(o, "hidden_act", json_string(gelu_act(c->gelu)));
    json_object_set_new(o, "hidden_dropout_prob", json_real(c->hidden_dropout));
    json_object_set_new(o, "attention_probs_dropout_prob", json_real(c->attention_dropout));
    json_object_set_new(o, "initializer_range", json_real(c->init_std));
    json_object_set_new(o, "position_embedding_type", json_string("absolute"));
    json_object_set_new(o, "tie_word_embeddings", json_true());
}

/* Whether loom's model is one Hugging Face's megatron-bert holds; a one-line error saying what it
 * has instead */
static enum loom_status bert_export_check(const struct loom_transformer_config *c,
                                          struct loom_hf_form *form) {
    form->variant = 0;
    const char *no = NULL;
    if (!c->encoder || c->num_tokentypes != 2 || !c->lm_head_transform || !c->output_bias)
        no = "it is not BERT's encoder form (2 token types, the LM head's transform, the output "
             "bias)";
    else if (c->norm != LOOM_NORM_LAYERNORM)
        no = "its norms are RMSNorm, not LayerNorm";
    else if (c->swiglu)
        no = "its MLP is SwiGLU, not a GELU";
    else if (c->posemb != LOOM_POSEMB_LEARNED)
        no = "its positions are not learned absolute ones";
    else if (!c->bias)
        no = "its linear layers have no biases (--disable-bias-linear)";
    else if (c->untie)
        no = "its output layer is untied from the word embedding";
    else if (c->qk_layernorm)
        no = "its queries and keys are normalised (--qk-layernorm)";
    else if (c->query_groups != c->heads)
        no = "it has grouped-query attention";
    else if (loom_gpt_head_size(c) * c->heads != c->hidden)
        no = "its heads are not hidden / heads wide (--kv-channels)";
    else if (c->rope_factor > 0 || c->rope_interpolation > 0)
        no = "it has rotary settings";
    if (no)
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "this BERT model has no Hugging Face megatron-bert equivalent: %s", no);
    if (c->gelu != c->head_gelu)
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "this BERT model has no Hugging Face megatron-bert equivalent: its MLP's "
                         "GELU is the %s form and its LM head's the %s form, and megatron-bert's "
                         "one hidden_act is both",
                         c->gelu == LOOM_GELU_ERF ? "erf" : "tanh",
                         c->head_gelu == LOOM_GELU_ERF ? "erf" : "tanh");
    return LOOM_OK;
}

/* ---- tensors ---- */
/* loom's names (within a layer, and the others) and Hugging Face's */
struct name_pair {
    const char *loom, *hf;
};
static const struct name_pair layer_names[] = {
    {"input_layernorm.weight", "attention.ln.weight"},
    {"input_layernorm.bias", "attention.ln.bias"},
    {"self_attention.linear_proj.weight", "attention.output.dense.weight"},
    {"self_attention.linear_proj.bias", "attention.output.dense.bias"},
    {"pre_mlp_layernorm.weight", "ln.weight"},
    {"pre_mlp_layernorm.bias", "ln.bias"},
    {"mlp.linear_fc1.weight", "intermediate.dense.weight"},
    {"mlp.linear_fc1.bias", "intermediate.dense.bias"},
    {"mlp.linear_fc2.weight", "output.dense.weight"},
    {"mlp.linear_fc2.bias", "output.dense.bias"},
};
static const struct name_pair top_names[] = {
    {"embedding.word_embeddings.weight", "bert.embeddings.word_embeddings.weight"},
    {"embedding.position_embeddings.weight", "bert.embeddings.position_embeddings.weight"},
    {"embedding.tokentype_embeddings.weight", "bert.embeddings.token_type_embeddings.weight"},
    {"encoder.final_layernorm.weight", "bert.encoder.ln.weight"},
    {"encoder.final_layernorm.bias", "bert.encoder.ln.bias"},
    {"lm_head.dense.weight", "cls.predictions.transform.dense.weight"},
    {"lm_head.dense.bias", "cls.predictions.transform.dense.bias"},
    {"lm_head.layer_norm.weight", "cls.predictions.transform.LayerNorm.weight"},
    {"lm_head.layer_norm.bias", "cls.predictions.transform.LayerNorm.bias"},
    {"output_layer.bias", "cls.predictions.bias"},
    {"pooler.dense.weight", "bert.pooler.dense.weight"},
    {"pooler.dense.bias", "bert.pooler.dense.bias"},
    {"binary_head.weight", "cls.seq_relationship.weight"},
    {"binary_head.bias", "cls.seq_relationship.bias"},
};
#define LAYERS "encoder.layers."

static const char *hf_of(const struct name_pair *t, size_t n, const char *loom) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(t[i].loom, loom)) return t[i].hf;
    return NULL;
}

/* The parameter's name within its layer (its whole name outside the layers); its layer or -1 */
static const char *split_layer(const struct loom_param *p, long long *layer) {
    *layer = -1;
    if (strncmp(p->name, LAYERS, strlen(LAYERS))) return p->name;
    *layer = strtoll(p->name + strlen(LAYERS), NULL, 10);
    return strchr(p->name + strlen(LAYERS), '.') + 1;
}

static int is_qkv(const char *local) { return !strncmp(local, "self_attention.linear_qkv.", 26); }

static enum loom_status bert_sources(const struct loom_transformer_config *c,
                                     const struct loom_hf_form *form, const struct loom_param *p,
                                     struct loom_hf_sources *s) {
    (void)form;
    memset(s, 0, sizeof *s);
    long long layer;
    const char *local = split_layer(p, &layer);
    const int64_t rows = (p->roles & LOOM_ROLE_VOCAB_ROWS) ? c->vocab_size : p->shape[0];
    const int64_t cols = p->ndim > 1 ? p->shape[1] : 0;
    if (layer >= 0 && is_qkv(local)) { /* query, key and value, each [NH HS (, H)] */
        static const char *const part[3] = {"query", "key", "value"};
        const char *what = local + 26; /* "weight" or "bias" */
        for (int k = 0; k < 3; k++) {
            snprintf(s->name[k], sizeof s->name[k], "bert.encoder.layer.%lld.attention.self.%s.%s",
                     layer, part[k], what);
            s->shape[k][0] = c->heads * loom_gpt_head_size(c);
            s->shape[k][1] = cols;
        }
        s->n = 3;
        return LOOM_OK;
    }
    const char *hf = layer >= 0 ? hf_of(layer_names, sizeof layer_names / sizeof layer_names[0], local)
                                : hf_of(top_names, sizeof top_names / sizeof top_names[0], local);
    if (!hf)
        return loom_fail(LOOM_ERR_UNSUPPORTED, "parameter %s has no Hugging Face counterpart",
                         p->name);
    if (layer >= 0)
        snprintf(s->name[0], sizeof s->name[0], "bert.encoder.layer.%lld.%s", layer, hf);
    else
        snprintf(s->name[0], sizeof s->name[0], "%s", hf);
    s->shape[0][0] = rows;
    s->shape[0][1] = cols;
    s->n = 1;
    return LOOM_OK;
}

static int bert_locate(const struct loom_transformer_config *c, const struct loom_hf_form *form,
                       const struct loom_param *p, int64_t row, int64_t col, int64_t *flat) {
    (void)form;
    const int64_t cols = p->ndim > 1 ? p->shape[1] : 1;
    if ((p->roles & LOOM_ROLE_VOCAB_ROWS) && row >= c->vocab_size) return -1; /* padding */
    long long layer;
    const char *local = split_layer(p, &layer);
    if (layer >= 0 && is_qkv(local)) {
        int part;
        int64_t head, d;
        loom_gpt_qkv_row(c, row, &part, &head, &d);
        const int64_t r = head * loom_gpt_head_size(c) + d;
        *flat = r * cols + (p->ndim > 1 ? col : 0);
        return part;
    }
    *flat = row * cols + (p->ndim > 1 ? col : 0);
    return 0;
}

/* A tied copy (cls.predictions.decoder.*) where the file has one: equal bit for bit to what it
 * is tied to, else refused */
static enum loom_status check_tied(const struct loom_safetensors *st, const char *copy,
                                   const char *of, int ndim, const int64_t *shape) {
    if (!loom_safetensors_find(st, copy)) return LOOM_OK;
    const int64_t n = shape[0] * (ndim > 1 ? shape[1] : 1);
    LOOM_CHECK(loom_safetensors_expect_shape(st, copy, ndim, shape));
    LOOM_CHECK(loom_safetensors_expect_shape(st, of, ndim, shape));
    float *a = malloc((size_t)n * sizeof(float)), *b = malloc((size_t)n * sizeof(float));
    enum loom_status s = a && b ? LOOM_OK : loom_fail(LOOM_ERR_OOM, "out of memory reading %s", copy);
    if (s == LOOM_OK) s = loom_safetensors_read_f32(st, copy, a, n);
    if (s == LOOM_OK) s = loom_safetensors_read_f32(st, of, b, n);
    if (s == LOOM_OK && memcmp(a, b, (size_t)n * sizeof(float)))
        s = loom_fail(LOOM_ERR_UNSUPPORTED,
                      "%s: %s differs from %s: loom's BERT ties its output layer to the word "
                      "embedding (and the decoder's bias to cls.predictions.bias)",
                      loom_safetensors_path(st), copy, of);
    free(a);
    free(b);
    return s;
}

/* The binary head is there when cls.seq_relationship is (with the pooler, which Megatron-LM has
 * only with it); the tied decoder's copies are checked */
static enum loom_status bert_weights_read(const struct loom_safetensors *st,
                                          struct loom_transformer_config *c, struct loom_hf_form *form) {
    (void)form;
    const int sop = loom_safetensors_find(st, "cls.seq_relationship.weight") != NULL;
    const int pool = loom_safetensors_find(st, "bert.pooler.dense.weight") != NULL;
    if (sop != pool)
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "%s: %s but no %s: loom's BERT has the pooler exactly when it has the "
                         "binary head (cls.seq_relationship)",
                         loom_safetensors_path(st), sop ? "cls.seq_relationship.*" : "bert.pooler.*",
                         sop ? "bert.pooler.*" : "cls.seq_relationship.*");
    c->binary_head = sop;
    const int64_t emb[2] = {c->vocab_size, c->hidden}, bias[2] = {c->vocab_size, 0};
    LOOM_CHECK(check_tied(st, "cls.predictions.decoder.weight",
                          "bert.embeddings.word_embeddings.weight", 2, emb));
    return check_tied(st, "cls.predictions.decoder.bias", "cls.predictions.bias", 1, bias);
}

/* the tied decoder's copies, checked by bert_weights_read */
static int bert_tensor_known(const struct loom_transformer_config *c,
                             const struct loom_hf_form *form, const char *name) {
    (void)c;
    (void)form;
    return !strcmp(name, "cls.predictions.decoder.weight") ||
           !strcmp(name, "cls.predictions.decoder.bias");
}

static const char *const bert_types[] = {"megatron-bert", NULL};
static const char *const bert_refused[] = {"bert", NULL};
const struct loom_hf_map loom_bert_hf_map = {
    .family = "bert",
    .model_types = bert_types,
    .refused_types = bert_refused,
    .config_read = bert_config_read,
    .weights_read = bert_weights_read,
    .tensor_known = bert_tensor_known,
    .export_check = bert_export_check,
    .config_write = bert_config_write,
    .sources = bert_sources,
    .locate = bert_locate,
    .table = loom_gpt_hf_table,
};
