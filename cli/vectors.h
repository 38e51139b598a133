/*
 * vectors.h — the line format of Berkeley TestFloat's test vectors, as
 * `emu gen` writes it and `emu verify` reads it:
 *
 *     A [B [C]] RESULT FLAGS
 *
 * operands and result as hexadecimal bit patterns (padded to the width of
 * their format), RESULT 0 or 1 for comparisons, FLAGS two hex digits
 * (inexact 1, underflow 2, overflow 4, infinite 8, invalid 16).  Blank
 * lines and '#' comments are skipped.
 *
 * Kept apart from the commands so that the fuzz harness can link it.
 */
#ifndef EMU_CLI_VECTORS_H
#define EMU_CLI_VECTORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum {
    VEC_MAX_OPERANDS = 3,
    VEC_LINE_MAX = 4096   /* longer lines are malformed */
};

/* What the lines of one file look like. */
typedef struct vec_layout {
    int operands;       /* 1..VEC_MAX_OPERANDS                           */
    int operand_bits;   /* width of each operand pattern, 1..64          */
    int result_bits;    /* width of the result, 1..64 (1: comparisons)   */
} vec_layout;

typedef struct vec_case {
    uint64_t operand[VEC_MAX_OPERANDS];
    uint64_t result;
    unsigned flags;
} vec_case;

typedef enum vec_status {
    VEC_OK,     /* *out holds the case                                   */
    VEC_SKIP,   /* blank line or comment                                  */
    VEC_BAD     /* malformed: why[] says how                              */
} vec_status;

/* Parses one line of `len` bytes (no terminator needed; NUL bytes are
 * just bad characters).  A trailing "\r" and a '#' comment are ignored. */
vec_status vec_parse_line(const vec_layout *lay, const char *line, size_t len,
                          vec_case *out, char *why, size_t why_size);

/* Writes the line of a case (no newline) into buf; returns its length,
 * or a value >= size if buf was too small (as snprintf). */
int vec_format_line(const vec_layout *lay, const vec_case *c, char *buf,
                    size_t size);

/* Reads the next line (without its '\n') into *buf, growing it as
 * needed.  Returns 1 for a line, 2 for a line longer than VEC_LINE_MAX
 * (the rest of it is skipped), 0 at end of file, -1 on a read error or
 * out of memory. */
int vec_read_line(FILE *fp, char **buf, size_t *cap, size_t *len);

#endif
