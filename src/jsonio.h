/* jsonio.h — JSON files the way mntrain writes them (index.json, config.json, summary.json,
 * metrics.jsonl), through jansson.
 * defines: mnt_json_num (a real, or null when not finite: NaN is not JSON), mnt_json_save (a
 *          whole file, atomically), mnt_json_save_precise, mnt_json_append (one line of a JSON-lines file, checked),
 *          mnt_json_fput_chars / mnt_json_fput_str (a string's JSON text onto a stream). */
#ifndef MNT_JSONIO_H
#define MNT_JSONIO_H

#include <stdio.h>

struct json_t;

struct json_t *mnt_json_num(double v);
/* DIR/NAME written atomically: DIR/.NAME.XXXXXX created exclusively (tmpfile.h), fsync, rename; nothing is left behind on failure, and
 * the error names the file and the reason (a value that cannot be encoded, or the write). */
int mnt_json_save(const char *dir, const char *name, struct json_t *o);
/* the same with every real written exactly (17 digits): state that must read back bit for bit */
int mnt_json_save_precise(const char *dir, const char *name, struct json_t *o);
/* o as one compact line appended to f (path names it in errors), flushed; every write checked. */
int mnt_json_append(FILE *f, const char *path, struct json_t *o);
/* s written as JSON string text, for files printed piece by piece (a trace): mnt_json_fput_chars its
 * characters escaped (quotes, backslashes, control characters), mnt_json_fput_str with the quotes;
 * NULL: "" */
void mnt_json_fput_chars(FILE *f, const char *s);
void mnt_json_fput_str(FILE *f, const char *s);

#endif
