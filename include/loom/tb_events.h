/* TensorBoard event files (--tensorboard-dir): the scalars Megatron-LM writes through its
 * SummaryWriter, in the same records, so that TensorBoard (or anything reading its files) shows a
 * loom run beside a Megatron-LM one.
 *
 * A file is a sequence of TFRecords, each
 *   uint64 length | uint32 masked CRC-32C of those 8 bytes | length bytes of data |
 *   uint32 masked CRC-32C of the data
 * (little-endian; masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8), the data a serialised
 * tensorflow.Event protocol buffer: the first record {wall_time, file_version "brain.Event:2"},
 * then one {wall_time, step, summary {value {tag, simple_value}}} per scalar.
 *
 * The file, "events.out.tfevents.<seconds>.<host>.<pid>.0" in the directory, is new for every run
 * and only ever appended to; the records queued since the last flush go out in one write, so that
 * a reader never sees a record cut in two by loom (only by a crash inside that write). */
#ifndef LOOM_TB_EVENTS_H
#define LOOM_TB_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "loom/status.h"

struct loom_tb;

/* Create `dir` (and its parents) if needed and a new event file in it, holding the first record.
 * Errors name the directory or file. */
enum loom_status loom_tb_open(struct loom_tb **out, const char *dir);
/* Queue the scalar `value` of `tag` at `step` (written at the next flush). */
enum loom_status loom_tb_scalar(struct loom_tb *tb, const char *tag, double value, int64_t step);
/* Append the queued records to the file in one write. */
enum loom_status loom_tb_flush(struct loom_tb *tb);
/* Flush (errors ignored: the file stays well-formed up to the last complete write) and close. */
void loom_tb_close(struct loom_tb *tb);
/* The file's path (for the log). */
const char *loom_tb_path(const struct loom_tb *tb);

/* CRC-32C (Castagnoli) of n bytes, the checksum of TFRecords (exposed for tests). */
uint32_t loom_crc32c(const void *data, size_t n);

#endif
