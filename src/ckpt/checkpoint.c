/* Layout-independent checkpoints.
 *
 *   ROOT/latest_checkpointed_iteration.txt   "N" (Megatron's name), written last, atomically
 *   ROOT/iter_NNNNNNN/model.safetensors       every parameter as its full logical tensor
 *   ROOT/iter_NNNNNNN/optim.safetensors       AdamW moments: exp_avg.<name>, exp_avg_sq.<name>
 *   ROOT/iter_NNNNNNN/meta.json               model configuration and training state
 *
 * Saving: world rank 0 assembles each full tensor from the tensor-parallel slices of the ranks
 * that hold it (data-parallel rank 0 of the owning pipeline stage), checks that every value is
 * finite, and writes the files into a temporary directory that is renamed into place (an
 * existing directory of the same iteration is swapped with it in one step, or kept when it holds
 * the same bytes); the pointer file is updated only then. Stale temporaries of earlier saves
 * (iter_N.tmp.PID, iter_N.old.PID, the pointer's LATEST.tmp.PID) are removed at each save and
 * after a failed one. Resolving follows the pointer; when it names no complete directory, the
 * newest complete one is taken with a warning.
 * Loading: every rank reads the files and keeps its own slice, so a checkpoint saved under one
 * (TP, PP, DP) loads under any other.
 */
#include <dirent.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <math.h>
#include <sys/stat.h>

#include "loom/ckpt.h"
#include "loom/comm.h"
#include "loom/fileio.h"
#include "loom/log.h"
#include "loom/safetensors.h"
#include "loom/settings.h"

#define LATEST_FILE "latest_checkpointed_iteration.txt"
#define FORMAT_VERSION 1
/* meta.json is a few kilobytes */
#define META_MAX_BYTES ((size_t)1 << 20)

/* ---- which ranks hold a parameter ---- */
static int holder_rank(const struct loom_model *m, const struct loom_param *p, int tp_rank) {
    int coords[LOOM_PDIM_COUNT] = {0};
    coords[LOOM_PDIM_TP] = tp_rank;
    coords[LOOM_PDIM_PP] = loom_model_param_stage(m, p);
    return loom_coords_to_rank(coords, m->par->size);
}

/* Assemble the full tensor of `p` from `src` (a flat device buffer laid out like the parameters)
 * on world rank 0 (into full, which only rank 0 needs). */
static enum loom_status gather_full(struct loom_model *m, const struct loom_param *p,
                                    const float *src, float *full, float *slice) {
    struct loom_parallel *par = m->par;
    int tp = loom_tp_size(par);
    int64_t ln = p->local_shape[0] * p->local_shape[1];
    for (int t = 0; t < tp; t++) {
        int holder = holder_rank(m, p, t);
        if (par->rank == holder && holder != 0) {
            m->be->ops->to_host(m->be, slice, src + p->offset, (size_t)ln * sizeof(float));
            LOOM_CHECK(loom_comm_send(par->world, slice, ln, LOOM_DTYPE_F32, 0, 7001));
        }
        if (par->rank == 0) {
            if (holder == 0)
                m->be->ops->to_host(m->be, slice, src + p->offset, (size_t)ln * sizeof(float));
            else
                LOOM_CHECK(loom_comm_recv(par->world, slice, ln, LOOM_DTYPE_F32, holder, 7001));
            for (int64_t i = 0; i < ln; i++) full[loom_param_global_index(p, t, tp, i)] = slice[i];
        }
    }
    return LOOM_OK;
}

static char *config_json(const struct loom_family_config_desc *fam, const void *cfg,
                         const struct loom_train_state *st, int64_t optim_step) {
    json_t *o = json_object();
    json_object_set_new(o, "format", json_string(fam->ckpt_format));
    json_object_set_new(o, "family", json_string(fam->name));
    json_object_set_new(o, "format_version", json_integer(FORMAT_VERSION));
    json_t *mc = json_object();
    loom_settings_meta_write(fam, cfg, mc);
    json_object_set_new(o, "model", mc);
    if (st) {
        json_object_set_new(o, "iteration", json_integer(st->iteration));
        json_object_set_new(o, "consumed_samples", json_integer(st->consumed_samples));
        if (st->consumed_valid_samples >= 0)
            json_object_set_new(o, "consumed_valid_samples",
                                json_integer(st->consumed_valid_samples));
        json_object_set_new(o, "seed", json_integer((json_int_t)st->seed));
        json_object_set_new(o, "optimizer_step", json_integer(optim_step));
        json_object_set_new(o, "skipped_iterations", json_integer(st->skipped));
        if (st->scheduler_samples >= 0)
            json_object_set_new(o, "scheduler_samples", json_integer(st->scheduler_samples));
        json_object_set_new(o, "loss_scale", json_real(st->loss_scale));
        json_object_set_new(o, "loss_scale_growth_tracker", json_integer(st->growth_tracker));
        json_object_set_new(o, "loss_scale_hysteresis_tracker", json_integer(st->hysteresis_tracker));
        if (st->has_lr) { /* in samples, as Megatron's scheduler state */
            json_t *lr = json_object();
            json_object_set_new(lr, "max_lr", json_real(st->lr.max_lr));
            json_object_set_new(lr, "min_lr", json_real(st->lr.min_lr));
            json_object_set_new(lr, "warmup_samples", json_real(st->lr.warmup_steps));
            json_object_set_new(lr, "decay_samples", json_integer(st->lr.decay_steps));
            json_object_set_new(lr, "decay_style", json_string(loom_lr_style_name(st->lr.style)));
            if (st->lr.decoupled_max_lr >= 0) { /* the embedding's and output layer's own */
                json_object_set_new(lr, "decoupled_lr", json_real(st->lr.decoupled_max_lr));
                json_object_set_new(lr, "decoupled_min_lr", json_real(st->lr.decoupled_min_lr));
            }
            if (st->lr.style == LOOM_LR_WSD) {
                json_object_set_new(lr, "wsd_decay_samples", json_integer(st->lr.wsd_decay_steps));
                json_object_set_new(lr, "wsd_decay_style",
                                    json_string(loom_wsd_style_name(st->lr.wsd_style)));
            }
            json_object_set_new(lr, "start_weight_decay", json_real(st->wd.start_wd));
            json_object_set_new(lr, "end_weight_decay", json_real(st->wd.end_wd));
            json_object_set_new(lr, "weight_decay_incr_samples", json_integer(st->wd.incr_steps));
            json_object_set_new(lr, "weight_decay_incr_style",
                                json_string(loom_wd_style_name(st->wd.style)));
            json_object_set_new(o, "lr_schedule", lr);
        }
    }
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(o);
    return s;
}

enum loom_status loom_ckpt_write_meta(const char *path, const struct loom_family_config_desc *fam,
                                      const void *cfg, const struct loom_train_state *st,
                                      int64_t optim_step) {
    char *s = config_json(fam, cfg, st, optim_step);
    if (!s) return loom_fail(LOOM_ERR_OOM, "out of memory writing %s", path);
    enum loom_status r = loom_atomic_write_file(path, s, strlen(s));
    free(s);
    return r;
}

/* The settings of model m's family (its meta.json's "family" and "model"): the family of that
 * name, the default family's for a family without settings of its own */
static const struct loom_family_config_desc *model_desc(const struct loom_model *m) {
    const struct loom_family_config_desc *d = loom_family_config_find(m->family->name);
    return d ? d : loom_family_config_default();
}

/* The first non-finite value of x[0..n), or -1 when all are finite. */
static int64_t first_nonfinite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

/* With `iteration` >= 0 (a training checkpoint) rank 0 checks that each gathered tensor is
 * finite: a non-finite value is an error naming the tensor and the iteration, and nothing is
 * added to `w` after it (every rank still takes part in every gather). */
static enum loom_status add_param_tensors(struct loom_model *m, struct loom_safetensors_writer *w,
                                          const float *src, const char *prefix, float **bufs,
                                          int64_t iteration) {
    float *slice = NULL;
    int64_t max_local = 0;
    for (int i = 0; i < m->nparams; i++) {
        int64_t n = m->params[i].local_shape[0] * m->params[i].local_shape[1];
        if (n > max_local) max_local = n;
    }
    slice = malloc((size_t)max_local * sizeof(float));
    if (!slice) return loom_fail(LOOM_ERR_OOM, "out of memory saving a checkpoint");
    enum loom_status bad = LOOM_OK;
    for (int i = 0; i < m->nparams; i++) {
        const struct loom_param *p = &m->params[i];
        int64_t n = p->shape[0] * p->shape[1];
        float *full = NULL;
        if (m->par->rank == 0) {
            full = malloc((size_t)n * sizeof(float));
            if (!full) {
                free(slice);
                return loom_fail(LOOM_ERR_OOM, "out of memory saving %s", p->name);
            }
            bufs[i] = full;
        }
        enum loom_status s = gather_full(m, p, src, full, slice);
        if (s != LOOM_OK) {
            free(slice);
            return s;
        }
        if (m->par->rank == 0 && w && bad == LOOM_OK) {
            char name[160];
            snprintf(name, sizeof name, "%s%s", prefix, p->name);
            int64_t at = iteration >= 0 ? first_nonfinite(full, n) : -1;
            if (at >= 0)
                bad = loom_fail(LOOM_ERR_INTERNAL, "iteration %lld: %s holds a non-finite value "
                                "(%g at element %lld); not saved (the training diverged: lower "
                                "--lr or set --clip-grad)", (long long)iteration, name,
                                (double)full[at], (long long)at);
            else
                bad = loom_safetensors_writer_add(w, name, LOOM_DTYPE_F32, p->ndim, p->shape, full);
        }
    }
    free(slice);
    if (bad != LOOM_OK) return bad;
    return LOOM_OK;
}

/* Write the tensors of `m` to `path`: the buffer src laid out as the parameters, or with opt
 * (src NULL) the optimizer's two moments, as exp_avg.* and exp_avg_sq.* (gathered from the
 * data-parallel ranks' shares with the distributed optimizer). */
static enum loom_status save_tensors(struct loom_model *m, const char *path, const float *src,
                                     struct loom_adamw *opt, int64_t iteration) {
    struct loom_safetensors_writer *w = NULL;
    float **bufs = calloc((size_t)m->nparams * 2, sizeof(float *));
    if (!bufs) return loom_fail(LOOM_ERR_OOM, "out of memory saving a checkpoint");
    enum loom_status s = LOOM_OK;
    if (m->par->rank == 0) s = loom_safetensors_writer_init(&w);
    for (int k = 0; k < (opt ? 2 : 1); k++) {
        const float *from = src;
        if (opt) {
            enum loom_status s2 = loom_adamw_moment(opt, m, k, &from);
            if (s == LOOM_OK) s = s2;
        }
        /* every rank takes part in every gather, whatever failed before on rank 0 */
        enum loom_status s3 =
            add_param_tensors(m, s == LOOM_OK ? w : NULL, from,
                              opt ? (k ? "exp_avg_sq." : "exp_avg.") : "", bufs + k * m->nparams,
                              iteration);
        if (s == LOOM_OK) s = s3;
    }
    if (s == LOOM_OK && m->par->rank == 0) {
        loom_safetensors_writer_set_metadata(w, "format", "loom");
        s = loom_safetensors_writer_save(w, path);
    }
    if (w) loom_safetensors_writer_free(w);
    for (int i = 0; i < m->nparams * 2; i++) free(bufs[i]);
    free(bufs);
    return s;
}

/* ---- loom's own names in a checkpoint root ------------------------------------------------ */

enum entry_kind { ENTRY_OTHER, ENTRY_ITER, ENTRY_TMP, ENTRY_OLD, ENTRY_LATEST_TMP };

/* Length of the run of decimal digits at s. */
static size_t digits(const char *s) {
    size_t n = 0;
    while (s[n] >= '0' && s[n] <= '9') n++;
    return n;
}

/* What a directory entry of a checkpoint root is: iter_N (ENTRY_ITER), iter_N.tmp.PID (a save's
 * temporary directory), iter_N.old.PID (a checkpoint set aside while replaced), the pointer's
 * temporary LATEST.tmp.PID; anything else is not loom's. *iter gets N, *base_len the length of
 * "iter_N". */
static enum entry_kind entry_kind(const char *name, long long *iter, size_t *base_len) {
    static const char latest_tmp[] = LATEST_FILE ".tmp.";
    if (strncmp(name, latest_tmp, sizeof latest_tmp - 1) == 0) {
        const char *pid = name + sizeof latest_tmp - 1;
        size_t n = digits(pid);
        return n > 0 && pid[n] == 0 ? ENTRY_LATEST_TMP : ENTRY_OTHER;
    }
    if (strncmp(name, "iter_", 5) != 0) return ENTRY_OTHER;
    size_t n = digits(name + 5);
    if (n == 0 || n > 18) return ENTRY_OTHER;
    *iter = strtoll(name + 5, NULL, 10);
    *base_len = 5 + n;
    const char *rest = name + 5 + n;
    if (*rest == 0) return ENTRY_ITER;
    enum entry_kind k = strncmp(rest, ".tmp.", 5) == 0   ? ENTRY_TMP
                        : strncmp(rest, ".old.", 5) == 0 ? ENTRY_OLD
                                                         : ENTRY_OTHER;
    if (k == ENTRY_OTHER) return k;
    size_t np = digits(rest + 5);
    return np > 0 && rest[5 + np] == 0 ? k : ENTRY_OTHER;
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A checkpoint directory is complete when it holds meta.json (written last): loom names a
 * directory iter_N only by renaming a complete one, so this tells a complete iter_N (or a
 * set-aside copy) from a missing one or anything else of that name. */
static int complete_dir(const char *dir) {
    char path[4500];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    return loom_file_exists(path);
}

/* The names in `root` (malloc'd, NULL-terminated; NULL when it cannot be listed). */
static char **list_dir(const char *root) {
    DIR *d = opendir(root);
    if (!d) return NULL;
    size_t n = 0, cap = 16;
    char **names = malloc(cap * sizeof *names);
    struct dirent *e;
    while (names && (e = readdir(d)) != NULL) {
        if (n + 1 == cap) {
            char **nn = realloc(names, (cap *= 2) * sizeof *names);
            if (!nn) {
                for (size_t i = 0; i < n; i++) free(names[i]);
                free(names);
                names = NULL;
                break;
            }
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name))) continue;
        n++;
    }
    closedir(d);
    if (names) names[n] = NULL;
    return names;
}

static void free_list(char **names) {
    if (!names) return;
    for (char **p = names; *p; p++) free(*p);
    free(names);
}

/* Remove what killed or failed saves left in `root`: every iter_N.tmp.PID and LATEST.tmp.PID,
 * and every iter_N.old.PID whose iter_N exists; an iter_N.old.PID whose iter_N is missing (a save
 * stopped between its two renames) is the complete old checkpoint and is put back as iter_N.
 * Two runs must not save into one directory at the same time (each would remove the other's
 * temporaries, as their pointers would overwrite each other). */
static enum loom_status clean_stale(const char *root) {
    char **names = list_dir(root);
    if (!names) return LOOM_OK; /* nothing there yet, or the save's own error will say why */
    enum loom_status s = LOOM_OK;
    /* the set-aside copies first, so that a restored iter_N makes its other copies stale */
    for (int pass = 0; pass < 2 && s == LOOM_OK; pass++) {
        for (char **p = names; *p && s == LOOM_OK; p++) {
            long long it;
            size_t base_len = 0;
            enum entry_kind k = entry_kind(*p, &it, &base_len);
            if (k != (pass == 0 ? ENTRY_OLD : ENTRY_TMP) && !(pass == 1 && k == ENTRY_LATEST_TMP))
                continue;
            char path[4400], base[4400];
            snprintf(path, sizeof path, "%s/%s", root, *p);
            if (k == ENTRY_OLD) {
                snprintf(base, sizeof base, "%s/%.*s", root, (int)base_len, *p);
                if (!is_dir(base) && complete_dir(path)) {
                    s = loom_atomic_rename_dir(path, base);
                    if (s == LOOM_OK)
                        loom_log_warn("%s: put back %s, set aside by an interrupted save", base,
                                      *p);
                    continue;
                }
            }
            s = loom_rm_rf(path);
        }
    }
    free_list(names);
    if (s == LOOM_OK) s = loom_fsync_dir(root);
    return s;
}

/* true when files `a` and `b` exist and hold the same bytes. */
static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    static char ba[1 << 16], bb[1 << 16];
    while (same) {
        size_t na = fread(ba, 1, sizeof ba, fa), nb = fread(bb, 1, sizeof bb, fb);
        if (na != nb || memcmp(ba, bb, na) != 0) same = 0;
        if (na < sizeof ba) {
            if (ferror(fa) || ferror(fb)) same = 0;
            break;
        }
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* true when checkpoint directory `dir` exists, is complete and holds the same files, byte for
 * byte, as the freshly written `tmp`. */
static int same_checkpoint(const char *tmp, const char *dir) {
    static const char *const files[] = {"meta.json", "model.safetensors", "optim.safetensors"};
    if (!is_dir(dir) || !complete_dir(dir)) return 0;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char a[4400], b[4400];
        snprintf(a, sizeof a, "%s/%s", tmp, files[i]);
        snprintf(b, sizeof b, "%s/%s", dir, files[i]);
        int ea = loom_file_exists(a), eb = loom_file_exists(b);
        if (ea != eb || (ea && !same_file(a, b))) return 0;
    }
    return 1;
}

/* Point ROOT's "latest" file at `iteration` (left alone when it already does). */
static enum loom_status write_latest(const char *root, int64_t iteration) {
    char latest[4200], text[32];
    snprintf(latest, sizeof latest, "%s/" LATEST_FILE, root);
    int n = snprintf(text, sizeof text, "%lld\n", (long long)iteration);
    char *old = NULL;
    size_t len = 0;
    if (loom_read_file(latest, 64, &old, &len) == LOOM_OK) {
        int same = len == (size_t)n && memcmp(old, text, len) == 0;
        free(old);
        if (same) return LOOM_OK;
    }
    loom_clear_error();
    return loom_atomic_write_file(latest, text, (size_t)n);
}

enum loom_status loom_ckpt_save(const char *root, struct loom_model *m, struct loom_adamw *opt,
                                const struct loom_train_state *st) {
    int rank0 = m->par->rank == 0;
    char dir[4096], tmp[4200], path[4400];
    snprintf(dir, sizeof dir, "%s/iter_%07lld", root, (long long)st->iteration);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", dir, (int)getpid());
    enum loom_status s = LOOM_OK;
    if (rank0) {
        s = loom_mkdir_p(root);
        if (s == LOOM_OK) s = clean_stale(root);
        if (s == LOOM_OK) s = loom_mkdir_p(tmp);
    }
    /* every rank takes part in the gathers even if rank 0 failed to make the directory */
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    enum loom_status s2 = save_tensors(m, path, m->param_mem, NULL, st->iteration);
    if (s == LOOM_OK) s = s2;
    if (opt) {
        snprintf(path, sizeof path, "%s/optim.safetensors", tmp);
        s2 = save_tensors(m, path, NULL, opt, st->iteration);
        if (s == LOOM_OK) s = s2;
    }
    if (rank0 && s == LOOM_OK) {
        snprintf(path, sizeof path, "%s/meta.json", tmp);
        s = loom_ckpt_write_meta(path, model_desc(m), m->config, st, opt ? opt->step : 0);
        /* a checkpoint of this iteration already there with the same bytes (a finished run
         * launched again) is kept as it is */
        if (s == LOOM_OK && same_checkpoint(tmp, dir))
            s = loom_rm_rf(tmp);
        else if (s == LOOM_OK)
            s = loom_atomic_rename_dir(tmp, dir);
        if (s == LOOM_OK) s = write_latest(root, st->iteration);
    }
    if (rank0 && s != LOOM_OK) {
        /* leave nothing of this save behind (the message is the first failure's) */
        char why[1024];
        snprintf(why, sizeof why, "%s", loom_last_error());
        loom_rm_rf(tmp);
        clean_stale(root);
        loom_fail(s, "%s", why);
    }
    if (m->par->world_size > 1) {
        int ok = s == LOOM_OK;
        LOOM_CHECK(loom_comm_broadcast(m->par->world, &ok, 1, LOOM_DTYPE_I32, 0));
        if (!ok && s == LOOM_OK) return loom_fail(LOOM_ERR_IO, "saving the checkpoint failed on rank 0");
    }
    return s;
}

/* The newest complete checkpoint in `root` (an iter_N, or a set-aside iter_N.old.PID whose iter_N
 * is missing) into dir; its iteration, or -1 when there is none. */
static long long newest_complete(const char *root, char *dir, size_t cap) {
    char **names = list_dir(root);
    long long best = -1;
    for (char **p = names; p && *p; p++) {
        long long it;
        size_t base_len = 0;
        enum entry_kind k = entry_kind(*p, &it, &base_len);
        if ((k != ENTRY_ITER && k != ENTRY_OLD) || it < best) continue;
        char path[4400], base[4400];
        snprintf(path, sizeof path, "%s/%s", root, *p);
        if (k == ENTRY_OLD) {
            snprintf(base, sizeof base, "%s/%.*s", root, (int)base_len, *p);
            if (is_dir(base)) continue;
        }
        if (it == best && k == ENTRY_OLD) continue; /* iter_N itself is preferred */
        if (!is_dir(path) || !complete_dir(path)) continue;
        best = it;
        snprintf(dir, cap, "%s", path);
    }
    free_list(names);
    return best;
}

/* The pointer file's iteration (strict: see ckpt.h) */
enum loom_status loom_ckpt_read_pointer(const char *root, long long *it) {
    char path[4200];
    snprintf(path, sizeof path, "%s/" LATEST_FILE, root);
    *it = -1;
    /* a pointer that is there but cannot be read (not a regular file, say) is an error */
    if (!loom_file_exists(path)) return LOOM_OK;
    char *text = NULL;
    size_t len = 0;
    LOOM_CHECK(loom_read_file(path, 64, &text, &len));
    /* decimal digits, then at most a line end: "4abc" is not 4 */
    size_t nd = 0;
    while (nd < len && text[nd] >= '0' && text[nd] <= '9') nd++;
    size_t rest = nd;
    if (rest < len && text[rest] == '\r') rest++;
    if (rest < len && text[rest] == '\n') rest++;
    long long v = 0;
    for (size_t i = 0; i < nd && nd <= 18; i++) v = v * 10 + (text[i] - '0');
    free(text);
    if (nd == 0 || nd > 18 || rest != len)
        return loom_fail(LOOM_ERR_FORMAT, "%s: expected an iteration number (1 to 18 decimal "
                         "digits and a line end)", path);
    *it = v;
    return LOOM_OK;
}

/* Resolve ROOT to the checkpoint directory: ROOT itself if it holds meta.json, else
 * ROOT/iter_N from the pointer file. When the pointer is missing or names a directory that is
 * missing or incomplete (a save interrupted on a file system that cannot swap directories, or
 * the pointer lost), the newest complete checkpoint is taken with a warning. */
enum loom_status loom_ckpt_resolve(const char *root, char *dir, size_t cap) {
    char path[4200];
    snprintf(path, sizeof path, "%s/meta.json", root);
    if (loom_file_exists(path)) {
        snprintf(dir, cap, "%s", root);
        return LOOM_OK;
    }
    snprintf(path, sizeof path, "%s/" LATEST_FILE, root);
    char found[4400];
    static int warned; /* once a process: the configuration and the tensors resolve alike */
    long long it;
    LOOM_CHECK(loom_ckpt_read_pointer(root, &it));
    if (it < 0) {
        /* no pointer: the newest complete checkpoint */
        it = newest_complete(root, found, sizeof found);
        if (it < 0)
            return loom_fail(LOOM_ERR_IO, "%s: not a loom checkpoint (no meta.json and no %s)",
                             root, LATEST_FILE);
        loom_clear_error();
        if (!warned++ && loom_log_rank() == 0)
            loom_log_warn("%s: no %s; loading %s, the newest complete checkpoint", root,
                          LATEST_FILE, found);
        snprintf(dir, cap, "%s", found);
        return LOOM_OK;
    }
    snprintf(dir, cap, "%s/iter_%07lld", root, it);
    if (complete_dir(dir)) return LOOM_OK;
    long long got = newest_complete(root, found, sizeof found);
    if (got < 0)
        return loom_fail(LOOM_ERR_IO, "%s names iteration %lld, but %s is missing or incomplete "
                         "and no other complete checkpoint is in %s", path, it, dir, root);
    if (!warned++ && loom_log_rank() == 0)
        loom_log_warn("%s names iteration %lld, but %s is missing or incomplete; loading %s, the "
                      "newest complete checkpoint", path, it, dir, found);
    snprintf(dir, cap, "%s", found);
    return LOOM_OK;
}

static enum loom_status get_int(json_t *o, const char *key, const char *file, int64_t *out) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" missing or not an integer", file, key);
    *out = (int64_t)json_integer_value(v);
    return LOOM_OK;
}
static enum loom_status get_num(json_t *o, const char *key, const char *file, double *out) {
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v))
        return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" missing or not a number", file, key);
    *out = json_number_value(v);
    return LOOM_OK;
}
/* An optional count of the training state: absent, *out keeps its value; present, it must be an
 * integer >= 0 (a negative iteration or sample count would place the data and the schedules
 * before their start). */
static enum loom_status get_count(json_t *o, const char *key, const char *file, int64_t *out) {
    json_t *v = json_object_get(o, key);
    if (!v) return LOOM_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" must be an integer >= 0", file, key);
    *out = (int64_t)json_integer_value(v);
    return LOOM_OK;
}
/* The schedule's rates, weight decays and sample counts: required, >= 0 */
static enum loom_status get_rate(json_t *o, const char *key, const char *file, double *out) {
    LOOM_CHECK(get_num(o, key, file, out));
    if (!(*out >= 0))
        return loom_fail(LOOM_ERR_FORMAT, "%s: \"lr_schedule\" \"%s\" must be >= 0", file, key);
    return LOOM_OK;
}
static enum loom_status get_samples(json_t *o, const char *key, const char *file, int64_t *out) {
    LOOM_CHECK(get_int(o, key, file, out));
    if (*out < 0)
        return loom_fail(LOOM_ERR_FORMAT, "%s: \"lr_schedule\" \"%s\" must be >= 0", file, key);
    return LOOM_OK;
}
/* The model family of a meta.json: its "family", or for checkpoints from before it was recorded
 * the family whose format "format" names (absent, or one loom does not know: gpt, which was all
 * such checkpoints held) */
static enum loom_status meta_family(json_t *o, const char *file,
                                    const struct loom_family_config_desc **fam) {
    if (!json_is_object(o))
        return loom_fail(LOOM_ERR_FORMAT, "%s: not a JSON object", file);
    json_t *fv = json_object_get(o, "format_version");
    if (fv && (!json_is_integer(fv) || json_integer_value(fv) != FORMAT_VERSION))
        return loom_fail(LOOM_ERR_FORMAT, "%s: \"format_version\" must be the integer %d (a "
                         "version this loom reads)", file, FORMAT_VERSION);
    json_t *fmt = json_object_get(o, "format");
    if (fmt && (!json_is_string(fmt) || !loom_family_config_by_format(json_string_value(fmt))))
        return loom_fail(LOOM_ERR_FORMAT, "%s: \"format\" is not a checkpoint format loom knows",
                         file);
    json_t *f = json_object_get(o, "family");
    if (f) {
        const char *name = json_string_value(f);
        if (!(*fam = loom_family_config_find(name)))
            return loom_fail(LOOM_ERR_FORMAT, "%s: \"family\" %s%s%s is not a model family loom knows "
                             "(%s)", file, name ? "\"" : "", name ? name : "(not a string)",
                             name ? "\"" : "", loom_family_config_names());
        if (fmt && loom_family_config_by_format(json_string_value(fmt)) != *fam)
            return loom_fail(LOOM_ERR_FORMAT, "%s: \"format\" is not the %s family's", file,
                             (*fam)->name);
        return LOOM_OK;
    }
    *fam = loom_family_config_by_format(json_string_value(fmt));
    if (!*fam) *fam = loom_family_config_default();
    return LOOM_OK;
}

static int lr_present_bad(json_t *o) {
    json_t *lr = json_object_get(o, "lr_schedule");
    return lr && !json_is_object(lr);
}

static enum loom_status parse_meta(json_t *o, const char *file,
                                   const struct loom_family_config_desc *want, void *cfg,
                                   struct loom_train_state *st, int64_t *optim_step) {
    const struct loom_family_config_desc *fam = NULL;
    LOOM_CHECK(meta_family(o, file, &fam));
    if (fam != want)
        return loom_fail(LOOM_ERR_INVALID_ARG, "%s: a %s model's checkpoint, not a %s model's", file,
                         fam->name, want->name);
    json_t *mc = json_object_get(o, "model");
    if (!json_is_object(mc)) return loom_fail(LOOM_ERR_FORMAT, "%s: no \"model\" object", file);
    LOOM_CHECK(loom_settings_meta_read(fam, mc, file, cfg));
    memset(st, 0, sizeof *st);
    *optim_step = 0;
    int64_t v = 0;
    LOOM_CHECK(get_count(o, "iteration", file, &st->iteration));
    LOOM_CHECK(get_count(o, "consumed_samples", file, &st->consumed_samples));
    st->consumed_valid_samples = -1; /* -1: not recorded */
    LOOM_CHECK(get_count(o, "consumed_valid_samples", file, &st->consumed_valid_samples));
    if (json_object_get(o, "seed")) {
        LOOM_CHECK(get_int(o, "seed", file, &v));
        st->seed = (uint64_t)v;
    }
    LOOM_CHECK(get_count(o, "optimizer_step", file, optim_step));
    LOOM_CHECK(get_count(o, "skipped_iterations", file, &st->skipped));
    st->scheduler_samples = -1;
    LOOM_CHECK(get_count(o, "scheduler_samples", file, &st->scheduler_samples));
    LOOM_CHECK(get_count(o, "loss_scale_growth_tracker", file, &st->growth_tracker));
    LOOM_CHECK(get_count(o, "loss_scale_hysteresis_tracker", file, &st->hysteresis_tracker));
    if (json_object_get(o, "loss_scale")) {
        LOOM_CHECK(get_num(o, "loss_scale", file, &st->loss_scale));
        if (!(st->loss_scale >= 0) || !isfinite(st->loss_scale))
            return loom_fail(LOOM_ERR_FORMAT, "%s: \"loss_scale\" must be finite and >= 0",
                             file);
    }
    if (lr_present_bad(o))
        return loom_fail(LOOM_ERR_FORMAT, "%s: \"lr_schedule\" is not an object", file);
    json_t *lr = json_object_get(o, "lr_schedule");
    if (lr) {
        const int sv = loom_lr_style_parse(json_string_value(json_object_get(lr, "decay_style")));
        if (sv < 0)
            return loom_fail(LOOM_ERR_FORMAT, "%s: bad \"lr_schedule\" \"decay_style\"", file);
        st->lr.style = (enum loom_lr_decay)sv;
        /* WSD's final decay; -1: not recorded (checkpoints from before it was) */
        st->lr.wsd_decay_steps = -1;
        if (sv == LOOM_LR_WSD && json_object_get(lr, "wsd_decay_samples")) {
            LOOM_CHECK(get_samples(lr, "wsd_decay_samples", file, &st->lr.wsd_decay_steps));
            const int w =
                loom_wsd_style_parse(json_string_value(json_object_get(lr, "wsd_decay_style")));
            if (w < 0) return loom_fail(LOOM_ERR_FORMAT, "%s: bad \"wsd_decay_style\"", file);
            st->lr.wsd_style = (enum loom_lr_wsd)w;
        }
        LOOM_CHECK(get_rate(lr, "max_lr", file, &st->lr.max_lr));
        LOOM_CHECK(get_rate(lr, "min_lr", file, &st->lr.min_lr));
        st->lr.decoupled_max_lr = st->lr.decoupled_min_lr = -1; /* none recorded: none */
        if (json_object_get(lr, "decoupled_lr")) {
            LOOM_CHECK(get_rate(lr, "decoupled_lr", file, &st->lr.decoupled_max_lr));
            LOOM_CHECK(get_rate(lr, "decoupled_min_lr", file, &st->lr.decoupled_min_lr));
        }
        LOOM_CHECK(get_rate(lr, "warmup_samples", file, &st->lr.warmup_steps));
        LOOM_CHECK(get_samples(lr, "decay_samples", file, &st->lr.decay_steps));
        LOOM_CHECK(get_rate(lr, "start_weight_decay", file, &st->wd.start_wd));
        LOOM_CHECK(get_rate(lr, "end_weight_decay", file, &st->wd.end_wd));
        LOOM_CHECK(get_samples(lr, "weight_decay_incr_samples", file, &st->wd.incr_steps));
        const int wdv =
            loom_wd_style_parse(json_string_value(json_object_get(lr, "weight_decay_incr_style")));
        if (wdv < 0) return loom_fail(LOOM_ERR_FORMAT, "%s: bad \"weight_decay_incr_style\"", file);
        st->wd.style = (enum loom_wd_incr)wdv;
        st->has_lr = 1;
    }
    return LOOM_OK;
}

/* meta.json of the checkpoint directory dir, parsed (with o_out: kept, for the caller to free) */
static enum loom_status load_meta_json(const char *dir, json_t **o_out, char *path, size_t cap) {
    snprintf(path, cap, "%s/meta.json", dir);
    char *text = NULL;
    size_t len = 0;
    *o_out = NULL;
    LOOM_CHECK(loom_read_file(path, META_MAX_BYTES, &text, &len));
    json_error_t err;
    *o_out = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    free(text);
    if (!*o_out)
        return loom_fail(LOOM_ERR_FORMAT, "%s: cannot read checkpoint metadata (%s, line %d)", path,
                         err.text, err.line);
    return LOOM_OK;
}

static enum loom_status read_meta_dir(const char *dir, const struct loom_family_config_desc *fam,
                                      void *cfg, struct loom_train_state *st, int64_t *optim_step) {
    char path[4200];
    json_t *o;
    LOOM_CHECK(load_meta_json(dir, &o, path, sizeof path));
    enum loom_status s = parse_meta(o, path, fam, cfg, st, optim_step);
    json_decref(o);
    return s;
}

enum loom_status loom_ckpt_read_config(const char *root, const struct loom_family_config_desc *fam,
                                       void *cfg, struct loom_train_state *st, int *has_optim) {
    char dir[4096], path[4200];
    LOOM_CHECK(loom_ckpt_resolve(root, dir, sizeof dir));
    int64_t step;
    LOOM_CHECK(read_meta_dir(dir, fam, cfg, st, &step));
    snprintf(path, sizeof path, "%s/optim.safetensors", dir);
    *has_optim = loom_file_exists(path);
    return LOOM_OK;
}

enum loom_status loom_ckpt_read_family(const char *root,
                                       const struct loom_family_config_desc **fam) {
    char dir[4096], path[4200];
    LOOM_CHECK(loom_ckpt_resolve(root, dir, sizeof dir));
    json_t *o;
    LOOM_CHECK(load_meta_json(dir, &o, path, sizeof path));
    enum loom_status s = meta_family(o, path, fam);
    json_decref(o);
    return s;
}

/* Rows of `p` in the checkpoint `st`. A parameter of LOOM_ROLE_VOCAB_ROWS (the word embedding,
 * the output layer) has one row per entry of the padded vocabulary, and the padding depends on
 * the layout (a multiple of --make-vocab-size-divisible-by x TP): a checkpoint saved under
 * another TP may hold more or fewer rows. Any count that covers the real vocabulary is accepted;
 * the rest are padding. */
static int64_t file_rows(const struct loom_model *m, const struct loom_safetensors *st,
                         const char *name, const struct loom_param *p) {
    if (p->ndim != 2 || !(p->roles & LOOM_ROLE_VOCAB_ROWS)) return p->shape[0];
    const struct loom_safetensors_entry *e = loom_safetensors_find(st, name);
    if (e && e->ndim == 2 && e->shape[1] == p->shape[1] && e->shape[0] >= m->vocab_size)
        return e->shape[0];
    return p->shape[0]; /* the shape check below reports the mismatch */
}

/* The tensors of `st` are exactly the parameters of m (names prefixed by each of prefixes[0..n)):
 * a tensor the model has no parameter for means the checkpoint is of another model than its
 * meta.json says (or was edited), and is an error naming it, as is a missing one. */
static enum loom_status same_tensor_set(const struct loom_model *m,
                                        const struct loom_safetensors *st,
                                        const char *const *prefixes, int n) {
    for (int64_t i = 0; i < loom_safetensors_count(st); i++) {
        const char *name = loom_safetensors_entry_at(st, i)->name;
        int known = 0;
        for (int k = 0; k < n && !known; k++) {
            size_t pl = strlen(prefixes[k]);
            known = strncmp(name, prefixes[k], pl) == 0 && loom_model_find_param(m, name + pl);
        }
        if (!known)
            return loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s' is not a parameter of the model its "
                             "meta.json describes", loom_safetensors_path(st), name);
    }
    for (int k = 0; k < n; k++)
        for (int i = 0; i < m->nparams; i++) {
            char name[200];
            snprintf(name, sizeof name, "%s%s", prefixes[k], m->params[i].name);
            if (!loom_safetensors_find(st, name))
                return loom_fail(LOOM_ERR_FORMAT, "%s: no tensor '%s' (a parameter of the model "
                                 "its meta.json describes)", loom_safetensors_path(st), name);
        }
    return LOOM_OK;
}

enum loom_status loom_ckpt_check_finite(const char *file, const char *name, const float *x,
                                        int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s' holds %s at element %lld: not "
                             "finite", file, name, isnan(x[i]) ? "NaN" : "Inf", (long long)i);
    return LOOM_OK;
}

/* Keep this rank's slice of every local parameter from `st` (names prefixed) into dst. Padding
 * rows of the vocabulary that the checkpoint lacks start at zero (they are never read by the
 * forward pass and get no gradient, so they stay zero). */
static enum loom_status load_slices(struct loom_model *m, const struct loom_safetensors *st,
                                    const char *prefix, float *dst) {
    int tp = loom_tp_size(m->par), tpr = loom_tp_rank(m->par);
    for (int i = 0; i < m->nparams; i++) {
        const struct loom_param *p = &m->params[i];
        if (!p->local) continue;
        char name[160];
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        int64_t rows = file_rows(m, st, name, p);
        int64_t fshape[2] = {rows, p->shape[1]};
        LOOM_CHECK(loom_safetensors_expect_shape(st, name, p->ndim, p->ndim == 2 ? fshape : p->shape));
        int64_t n = rows * p->shape[1], ln = p->local_shape[0] * p->local_shape[1];
        float *full = malloc((size_t)n * sizeof(float)), *slice = malloc((size_t)ln * sizeof(float));
        if (!full || !slice) {
            free(full);
            free(slice);
            return loom_fail(LOOM_ERR_OOM, "out of memory loading %s", p->name);
        }
        enum loom_status s = loom_safetensors_read_f32(st, name, full, n);
        if (s == LOOM_OK) s = loom_ckpt_check_finite(loom_safetensors_path(st), name, full, n);
        if (s == LOOM_OK) {
            for (int64_t k = 0; k < ln; k++) {
                int64_t g = loom_param_global_index(p, tpr, tp, k);
                slice[k] = g < n ? full[g] : 0.0f; /* row-major: g < n is row < rows */
            }
            m->be->ops->to_device(m->be, dst + p->offset, slice, (size_t)ln * sizeof(float));
        }
        free(full);
        free(slice);
        if (s != LOOM_OK) return s;
    }
    return LOOM_OK;
}

/* The checkpoint's model is the configured one: every architecture row of the family's settings
 * table (LOOM_LOAD_ARCH) with a meta.json key has the same meta.json value in both (the values
 * as checkpoints keep them: resolved, as the family's meta_write hook writes them). */
static enum loom_status same_architecture(const char *root, const struct loom_family_config_desc *d,
                                          const void *cfg, const void *saved) {
    json_t *here = json_object(), *there = json_object();
    enum loom_status s = LOOM_OK;
    if (!here || !there) s = loom_fail(LOOM_ERR_OOM, "out of memory reading %s", root);
    if (s == LOOM_OK) {
        loom_settings_meta_write(d, cfg, here);
        loom_settings_meta_write(d, saved, there);
    }
    for (int i = 0; s == LOOM_OK && i < d->nsettings; i++) {
        const struct loom_setting *r = &d->settings[i];
        if (r->load != LOOM_LOAD_ARCH || !r->meta) continue;
        json_t *a = json_object_get(here, r->meta), *b = json_object_get(there, r->meta);
        if ((!a && !b) || (a && b && json_equal(a, b))) continue;
        char *va = a ? json_dumps(a, JSON_ENCODE_ANY) : NULL;
        char *vb = b ? json_dumps(b, JSON_ENCODE_ANY) : NULL;
        s = loom_fail(LOOM_ERR_INVALID_ARG,
                      "--load %s: the checkpoint's model differs from the configured one (%s %s "
                      "there, %s here)",
                      root, r->meta, vb ? vb : "(not set)", va ? va : "(not set)");
        free(va);
        free(vb);
    }
    json_decref(here);
    json_decref(there);
    return s;
}

enum loom_status loom_ckpt_load(const char *root, struct loom_model *m, struct loom_adamw *opt) {
    char dir[4096], path[4200];
    LOOM_CHECK(loom_ckpt_resolve(root, dir, sizeof dir));
    const struct loom_family_config_desc *fam = model_desc(m);
    struct loom_train_state st;
    int64_t step;
    void *saved = calloc(1, fam->config_size);
    if (!saved) return loom_fail(LOOM_ERR_OOM, "out of memory reading %s", dir);
    enum loom_status s = read_meta_dir(dir, fam, saved, &st, &step);
    if (s == LOOM_OK) s = same_architecture(root, fam, m->config, saved);
    free(saved);
    LOOM_CHECK(s);
    struct loom_safetensors *sf;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    LOOM_CHECK(loom_safetensors_open(&sf, path));
    static const char *const model_prefix[] = {""}, *const optim_prefixes[] = {"exp_avg.",
                                                                              "exp_avg_sq."};
    s = same_tensor_set(m, sf, model_prefix, 1);
    if (s == LOOM_OK) s = load_slices(m, sf, "", m->param_mem);
    loom_safetensors_close(sf);
    LOOM_CHECK(s);
    if (opt) {
        snprintf(path, sizeof path, "%s/optim.safetensors", dir);
        LOOM_CHECK(loom_safetensors_open(&sf, path));
        s = same_tensor_set(m, sf, optim_prefixes, 2);
        /* with the distributed optimizer each moment goes through the gradient buffer (free
         * between steps), from which the rank takes its share */
        for (int k = 0; k < 2 && s == LOOM_OK; k++) {
            float *to = opt->distributed ? m->grad_mem : k ? opt->v : opt->m;
            s = load_slices(m, sf, k ? "exp_avg_sq." : "exp_avg.", to);
            if (s == LOOM_OK && opt->distributed) loom_adamw_set_moment(opt, m, k, to);
        }
        loom_safetensors_close(sf);
        LOOM_CHECK(s);
        opt->step = step;
    }
    return LOOM_OK;
}

enum loom_status loom_ckpt_prune(const char *root, int64_t every, int64_t latest, int rank) {
    if (rank != 0 || every <= 0) return LOOM_OK;
    DIR *d = opendir(root);
    if (!d) return loom_fail(LOOM_ERR_IO, "--save-retain-interval: cannot list %s", root);
    enum loom_status s = LOOM_OK;
    struct dirent *e;
    while (s == LOOM_OK && (e = readdir(d)) != NULL) {
        long long n;
        size_t base_len;
        /* exactly iter_ and 1 to 18 digits (not a temporary iter_N.tmp.PID being written) */
        if (entry_kind(e->d_name, &n, &base_len) != ENTRY_ITER) continue;
        if (n >= latest || n % every == 0) continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", root, e->d_name);
        s = loom_rm_rf(path);
    }
    closedir(d);
    return s;
}

enum loom_status loom_ckpt_save_buffer(const char *dir, struct loom_model *m, const float *buf) {
    char path[4400];
    enum loom_status s = LOOM_OK;
    if (m->par->rank == 0) s = loom_mkdir_p(dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    enum loom_status s2 = save_tensors(m, path, buf, NULL, -1);
    if (s == LOOM_OK) s = s2;
    if (s == LOOM_OK && m->par->rank == 0) {
        snprintf(path, sizeof path, "%s/meta.json", dir);
        s = loom_ckpt_write_meta(path, model_desc(m), m->config, NULL, 0);
    }
    return s;
}
