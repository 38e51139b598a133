/*
 * header.h — the settings line at the top of a vector file,
 *
 *     #! emu-vectors op=add in=SPEC out=SPEC mode=rne ... (emu gen/verify)
 *     #! emu-dot in=SPEC accum=SPEC k=16 ...              (emu dot)
 *
 * read as key=value items into a table that remembers the file and line
 * of every key: a bad value is reported as "FILE:LINE: header key 'mode':
 * ...", a key given twice (on one line or on two header lines) names both
 * lines, and a key the header cannot hold is refused.
 *
 * No function here exits or prints: the commands report, and the fuzz
 * harnesses (fuzz/fuzz_vec_header.c, fuzz/fuzz_dot_header.c) call the
 * same code the commands run.
 */
#ifndef EMU_CLI_HEADER_H
#define EMU_CLI_HEADER_H

#include <stdbool.h>
#include <stddef.h>

enum { CLI_HEADER_MAX_KEYS = 8, CLI_HEADER_VALUE_MAX = 256 };

typedef struct cli_header {
    const char *tag;                /* "#! emu-vectors"                   */
    const char *const *keys;        /* the keys it holds, NULL-terminated */
    const char *file;               /* for messages: a path or "<stdin>"  */
    char value[CLI_HEADER_MAX_KEYS][CLI_HEADER_VALUE_MAX];
    unsigned long line[CLI_HEADER_MAX_KEYS]; /* 0: not given              */
} cli_header;

/* keys: at most CLI_HEADER_MAX_KEYS names. */
void cli_header_init(cli_header *h, const char *tag, const char *const *keys,
                     const char *file);

/* If the line (len bytes, leading blanks allowed) begins with h's tag,
 * adds its items to h.  Returns 0 if it is no header line, 1 if it was
 * read, -1 if it is malformed (why: "FILE:LINE: ..." naming the item). */
int cli_header_read(cli_header *h, const char *line, size_t len,
                    unsigned long lineno, char *why, size_t why_size);

/* The value of key, or NULL if the header did not give it; *where (if
 * not NULL) receives "FILE:LINE: header key 'KEY'" for messages. */
const char *cli_header_get(const cli_header *h, const char *key, char *where,
                           size_t where_size);

/* Value parsers that report instead of exiting (the header's keys are
 * checked with them; the command-line options with the exiting ones of
 * cli.h, which call these). */
bool cli_text_u64(const char *s, unsigned long long *out);
bool cli_text_yes_no(const char *s, bool *out);

#endif
