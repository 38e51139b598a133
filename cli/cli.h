/*
 * cli.h — what the subcommands of the `emu` program share: a small option
 * parser, error reporting with the exit-code convention, the parsers of
 * formats, modes and numbers that every command accepts, the printers of
 * bit patterns and values, and atomic file output.
 *
 * Exit codes: 0 success, 1 data mismatch (emu verify), 2 usage or input
 * error (bad option, bad format spec, malformed vector line).
 */
#ifndef EMU_CLI_H
#define EMU_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "emu/emu.h"

#include "atomic_file.h" /* libemu-internal: the one atomic writer */
#include "header.h"

enum { CLI_EXIT_OK = 0, CLI_EXIT_MISMATCH = 1, CLI_EXIT_USAGE = 2 };

/* ---- options ------------------------------------------------------------
 * Long options are "--name value" or "--name=value"; the only short forms
 * are single letters ("-o FILE", "-h").  Anything else beginning with '-'
 * followed by a digit, '.', or a letter of "inf"/"nan" is a positional
 * argument, so negative numbers need no "--". */
typedef struct cli_opt {
    const char *name;   /* long name without "--"                        */
    char short_name;    /* 0 if none                                      */
    bool takes_value;
} cli_opt;

typedef struct cli_parser {
    const char *cmd;    /* subcommand name, for messages                  */
    int argc;
    char **argv;
    int next;           /* index of the next argument to look at          */
    bool positional_only; /* seen "--"                                     */
} cli_parser;

enum { CLI_ARG_END = -1, CLI_ARG_POSITIONAL = -2 };

void cli_parser_init(cli_parser *p, const char *cmd, int argc, char **argv);
/* Index into opts of the next option (its value in *value), or
 * CLI_ARG_POSITIONAL with the argument in *value, or CLI_ARG_END.
 * opts ends with a { NULL } entry.  Unknown options exit with status 2. */
int cli_next(cli_parser *p, const cli_opt *opts, const char **value);

/* ---- errors ---------------------------------------------------------- */
/* "emu CMD: message" on stderr, a hint to --help, exit 2. */
_Noreturn void cli_usage_error(const char *cmd, const char *fmt, ...);
/* "emu CMD: message" on stderr; the caller decides the exit code. */
void cli_error(const char *cmd, const char *fmt, ...);

/* ---- argument parsers: each exits with status 2 naming the option ----- */
/* --load FILE.fmt (global option); returns false after printing the error. */
bool cli_load_format_file(const char *path);
void cli_resolve_format(const char *cmd, const char *what, const char *spec,
                        emu_format *out);
uint64_t cli_parse_u64(const char *cmd, const char *opt, const char *s);
/* Mode name (rne rna rz ru rd ro sr srN) into r->mode and r->sr_bits. */
void cli_parse_mode(const char *cmd, const char *s, emu_rounding *r);
void cli_parse_tininess(const char *cmd, const char *s, emu_rounding *r);

/* ---- printing --------------------------------------------------------- */
enum { CLI_NUM_MAX = 64 };
/* Hex digits of a pattern of `bits` bits (TestFloat pads to this). */
int cli_hex_digits(int bits);
/* "0x3c00" for a pattern of fmt. */
void cli_bits_hex(const emu_format *fmt, uint64_t v, char *buf, size_t size);
/* "0 01111 0000000000": sign, exponent and fraction fields. */
void cli_bits_fields(const emu_format *fmt, uint64_t v, char *buf, size_t size);
/* The shortest decimal that reads back as x ("0.1", "-0", "inf", "nan"). */
void cli_decimal(double x, char *buf, size_t size);
/* %a, with "inf"/"nan" spelled as in cli_decimal. */
void cli_hexfloat(double x, char *buf, size_t size);
/* Writes s to stdout as one CSV field: as is, or quoted (quotes doubled)
 * if it holds a comma, a quote or a newline. */
void cli_csv_text(const char *s);
/* Class of a pattern in words: "zero", "subnormal", "normal", "inf",
 * "qnan", "snan" (IEEE formats), "nan". */
const char *cli_pattern_class(const emu_format *fmt, emu_bits b);

/* ---- input files ---------------------------------------------------------
 * FILE or "-" (standard input) for reading; *name is what messages call
 * it ("<stdin>").  NULL after reporting why (missing, unreadable, a
 * directory). */
FILE *cli_open_input(const char *cmd, const char *path, const char **name);

/* ---- atomic output ------------------------------------------------------
 * A file named on the command line is written through the library's
 * atomic writer (atomic_file.h): a temporary beside a regular target,
 * renamed over it by cli_output_commit(), so that a killed run leaves the
 * old file (or none), never half of a new one; a device or FIFO is
 * written in place; a symlink's target is replaced, the link kept.  Path
 * NULL or "-" means standard output. */
typedef struct cli_output {
    FILE *fp;
    bool to_file;          /* false: standard output */
    emu_atomic_file file;
} cli_output;

int cli_output_open(cli_output *o, const char *cmd, const char *path);
/* Flushes, syncs and renames; returns 0, or -1 after printing why (the
 * temporary is then removed). */
int cli_output_commit(cli_output *o, const char *cmd);
/* Removes the temporary file (on error paths). */
void cli_output_abort(cli_output *o);
/* The exit status of a command that printed to stdout: CLI_EXIT_OK, or
 * CLI_EXIT_USAGE after reporting a write error (a full disk, a closed pipe). */
int cli_stdout_status(const char *cmd);

/* ---- test-vector settings shared by gen and verify --------------------
 * The same options mean the same thing in both commands, and emu gen
 * writes them into a header line that emu verify reads back:
 *   #! emu-vectors op=add in=SPEC out=SPEC mode=rne tiny=after saturate=no seed=0 profile=ieee
 * Options given on the command line win over the header. */
typedef struct cli_vecopts {
    emu_op op;
    const char *format_spec;          /* --format: both, unless ...    */
    const char *in_spec, *out_spec;   /* ... --in / --out say otherwise */
    emu_rounding rnd;
    uint64_t seed;
    bool have_op, have_mode, have_tiny, have_saturate, have_seed,
         have_profile;
    emu_format in, out;               /* resolved by cli_vecopts_finish */
    char header_in[256], header_out[256]; /* specs read from a header */
    char in_where[300], out_where[300];   /* "FILE:LINE: header key 'in'" */
} cli_vecopts;

/* Handles one of --op --format --in --out --mode --tiny --saturate --seed
 * --profile (by long name); returns false if `name` is none of them. */
bool cli_vecopts_option(cli_vecopts *v, const char *cmd, const char *name,
                        const char *value);
/* The header's tag and keys (header.h reads it). */
#define CLI_VECTORS_TAG "#! emu-vectors"
extern const char *const cli_vecopts_header_keys[];
/* Takes from a header what the command line left open; returns false
 * with why ("FILE:LINE: header key 'mode': ...") if a value is unusable.
 * Format specs are checked by cli_vecopts_finish, which names their line. */
bool cli_vecopts_from_header(cli_vecopts *v, const cli_header *h, char *why,
                             size_t size);
/* Resolves the formats and checks the combination; exits 2 if unusable. */
void cli_vecopts_finish(cli_vecopts *v, const char *cmd);
/* Writes the header line (with its newline). */
void cli_vecopts_write_header(const cli_vecopts *v, FILE *fp);
/* --profile NAME (ieee ocp riscv) into r->profile; exits 2 naming the
 * profiles if NAME is none of them. */
void cli_parse_profile(const char *cmd, const char *s, emu_rounding *r);
/* The name of r's profile ("ieee" ...). */
const char *cli_profile_name(const emu_rounding *r);
/* "rne", "sr", "sr13". */
void cli_mode_name(const emu_rounding *r, char *buf, size_t size);

/* ---- emu dot settings, shared by dot gen and dot verify ------------------
 * The specs come from the options, else from the file's header:
 *   #! emu-dot in=SPEC out=SPEC accum=SPEC mode=rne k=16 seed=0 */
enum { CLI_DOT_MAX_K = 256, CLI_DOT_SPECS = 5 };
#define CLI_DOT_TAG "#! emu-dot"
typedef struct cli_dotopts {
    const char *in_spec, *out_spec, *accum_spec, *mode_spec, *profile_spec;
    uint64_t seed;
    unsigned k;
    bool have_seed, have_k;
    emu_format in, out;
    emu_accum model;
    emu_rounding rnd;
    /* For the specs read from a header (in, out, accum, mode): the text,
     * and "FILE:LINE: header key 'in'" for messages ("" if not). */
    char header_spec[CLI_DOT_SPECS][256];
    char where[CLI_DOT_SPECS][300];
} cli_dotopts;

extern const char *const cli_dot_header_keys[]; /* in out accum mode profile first */
/* K from 1 to CLI_DOT_MAX_K; false if s is not one. */
bool cli_dot_k(const char *s, unsigned *k);
/* Takes from a header what the command line left open; returns false
 * with why ("FILE:LINE: header key 'k': ...") if k or seed is unusable. */
bool cli_dot_from_header(cli_dotopts *d, const cli_header *h, char *why,
                         size_t size);

/* Resolves the specs (defaults: output in the accumulator's format, mode
 * rne, K 16); exits 2 naming what is wrong and where it came from. */
void cli_dot_finish(cli_dotopts *d);
/* Hex fields of a line (cut up in place): 2K operands, the result, the
 * flags.  Returns NULL, or why the line is malformed. */
const char *cli_dot_parse_line(const cli_dotopts *d, char *line, uint64_t *ab,
                               uint64_t *result, unsigned *flags);
/* The accumulator's value before the output rounding (hi + lo, see
 * emu_accum_dot) and its swamping counts. */
typedef struct cli_dot_sum {
    double hi, lo;
    emu_accum_counts counts;
} cli_dot_sum;
/* The unit on case k: the accumulator model over the K products, then the
 * output rounding.  Returns the result pattern, *flags its flags, and in
 * *sum (unless NULL) the accumulator's value. */
uint64_t cli_dot_evaluate(const cli_dotopts *d, const uint64_t *ab,
                          uint64_t k, unsigned *flags, cli_dot_sum *sum);

/* ---- emu dot --scaled settings (cmd_dot_scaled.c), for dot and coverage --
 *   #! emu-dot-scaled scaled=SPEC accum=SPEC out=SPEC mode=rne k=32 seed=0 */
enum { CLI_SDOT_MAX_K = EMU_DPI_MAX_K };
typedef struct cli_sdot {
    const char *scaled_spec, *accum_spec, *out_spec, *mode_spec;
    unsigned k;
    uint64_t seed;
    bool have_k;
    emu_scaled_format sf;
    emu_accum model;
    emu_format out, g32;
    emu_rounding rnd;
    unsigned nblocks;     /* scale codes per operand                    */
    unsigned fields;      /* hex fields of a line, RESULT and FLAGS too */
    int h;                /* the emu_dpi_open_scaled handle              */
} cli_sdot;

/* One line's codes, in line order. */
typedef struct cli_sdot_case {
    emu_dpi_u64 a[CLI_SDOT_MAX_K], b[CLI_SDOT_MAX_K];
    emu_dpi_u64 sa[CLI_SDOT_MAX_K], sb[CLI_SDOT_MAX_K];
    emu_dpi_u64 ga, gb;
} cli_sdot_case;

/* Takes from a '#! emu-dot-scaled' line (cut up in place) what the
 * command line left open. */
void cli_sdot_read_header(cli_sdot *d, char *line);
/* Resolves the settings and opens the DPI model; exits 2 naming what is
 * wrong. */
void cli_sdot_finish(cli_sdot *d);
/* The hex fields of a line (cut up in place) into c, *result, *flags;
 * NULL or why the line is malformed. */
const char *cli_sdot_parse_line(const cli_sdot *d, char *line,
                                cli_sdot_case *c, uint64_t *result,
                                unsigned *flags);
/* The unit on one case through emu_dpi_dot_scaled: the result pattern,
 * *flags its flags, or *why set (an element times its scale that is not
 * a binary32). */
uint64_t cli_sdot_eval(const cli_sdot *d, const cli_sdot_case *c,
                       unsigned *flags, const char **why);
/* The model's value before the tensor scales and the output rounding
 * (hi + lo, see emu_accum_dot); call after cli_sdot_eval accepted c. */
void cli_sdot_sum(const cli_sdot *d, const cli_sdot_case *c, double *hi,
                  double *lo);

/* A random operand pattern of f, the i-th of stream `stream`: half uniform
 * patterns, half a random exponent field with a structured or random
 * fraction (uniform patterns alone would almost never hit the edges of a
 * wide format).  emu gen and emu dot draw their operands here. */
uint64_t cli_random_pattern(const emu_format *f, uint64_t seed,
                            uint64_t stream, uint64_t i);

/* ---- subcommands ------------------------------------------------------ */
int cmd_formats(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_values(int argc, char **argv);
int cmd_round(int argc, char **argv);
int cmd_gen(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_coverage(int argc, char **argv);
int cmd_version(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_weights(int argc, char **argv);
int cmd_dot(int argc, char **argv);
/* emu dot with block-scaled operands (cmd_dot_scaled.c): cmd_dot hands
 * over when cli_dot_is_scaled says so. */
bool cli_dot_is_scaled(int argc, char **argv);
/* emu dot's positional arguments, VERB [FILE], one at a time: exits 2 on
 * a third. */
void cli_dot_operand(const char *val, const char **verb, const char **file);
/* true for gen, false for verify (which then has its FILE); exits 2 with
 * the reason on anything else. */
bool cli_dot_is_gen(const char *verb, const char *file);
int cmd_dot_scaled(int argc, char **argv);
int cmd_scaled(int argc, char **argv);

#endif
