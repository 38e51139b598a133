/*
 * main.c — the `emu` program: global options, then one subcommand.
 *
 *   emu [--load FILE.fmt]... COMMAND [options] [arguments]
 *
 * Each subcommand lives in its own cmd_*.c file and parses its own
 * options; this file only registers extra formats and dispatches.
 */
#include "cli.h"

#include <mpfr.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

/* A training step allocates and frees the same large blocks every step
 * (the choke point's result arrays, scratch, the GEMM's buffers).  With
 * glibc's defaults those above 128 KiB are mapped and unmapped each
 * time, and freed memory at the top of the heap is given back to the
 * kernel, so every step faults its pages in again and the kernel clears
 * them: 18% of an lstm step's samples were in the kernel.  Keeping freed
 * memory (trim only above 512 MiB of free space) and serving blocks up
 * to 32 MiB (glibc's own dynamic ceiling) from the heap removes that.
 * Nothing computed depends on it; peak RSS rose 1-2% in the gpt and
 * lstm runs measured (freed blocks are kept, not returned). */
static void keep_freed_memory(void)
{
#if defined(__GLIBC__)
    mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
    mallopt(M_TRIM_THRESHOLD, 512 * 1024 * 1024);
#endif
}

static const struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    { "formats", cmd_formats, "table of every registered format" },
    { "info", cmd_info, "constants, encoding and special values of one format" },
    { "values", cmd_values, "every bit pattern of a format of at most 16 bits" },
    { "round", cmd_round, "round values into a format under a rounding mode" },
    { "gen", cmd_gen, "generate test vectors (Berkeley TestFloat line format)" },
    { "verify", cmd_verify, "check test vectors against the emulator" },
    { "coverage", cmd_coverage, "what a test-vector file exercises, and what it missed" },
    { "dot", cmd_dot, "test vectors of a dot-product unit (gen, verify)" },
    { "scaled", cmd_scaled, "block-scaled formats (MX, NVFP4): quantize, pack, unpack" },
    { "train", cmd_train, "train a model in an emulated precision policy" },
    { "weights", cmd_weights, "what a weights file (safetensors) holds: show" },
    { "version", cmd_version, "print the version" },
};

int cmd_version(int argc, char **argv)
{
    if (argc > 0 && strcmp(argv[0], "--help") && strcmp(argv[0], "-h"))
        cli_usage_error("version", "unexpected argument '%s'", argv[0]);
    if (argc > 0) {
        printf("Usage: emu version\n\nPrints the versions of emu, libemu "
               "and the MPFR it was built with.\n");
        return CLI_EXIT_OK;
    }
    printf("emu %s (libemu %s, GNU MPFR %s)\n", EMU_VERSION_STRING,
           EMU_VERSION_STRING, mpfr_get_version());
    return cli_stdout_status("version");
}

static void usage(FILE *fp)
{
    fprintf(fp,
        "Usage: emu [--load FILE.fmt]... COMMAND [options] [arguments]\n"
        "\n"
        "Bit-exact emulation of floating-point formats (libemu %s).\n"
        "\n"
        "Commands:\n", EMU_VERSION_STRING);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(fp, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(fp,
        "\n"
        "Global options:\n"
        "  --load FILE.fmt  register the formats of a spec file (repeatable)\n"
        "  -h, --help       this help; 'emu COMMAND --help' for a command\n"
        "  --version        same as 'emu version'\n"
        "\n"
        "A FORMAT argument is a registered name or alias (binary16, e4m3,\n"
        "bf16, ...), an inline spec such as 'e5m10,bias=14' or\n"
        "'e4m3,nosubnormals,saturate', or the path of a .fmt spec file.\n"
        "\n"
        "Exit status: 0 success, 1 mismatches found (verify),\n"
        "2 usage or input error.\n");
}

int main(int argc, char **argv)
{
    keep_freed_memory();
    static const cli_opt opts[] = {
        { "load", 0, true }, { "help", 'h', false }, { "version", 0, false },
        { NULL, 0, false },
    };
    enum { OPT_LOAD, OPT_HELP, OPT_VERSION };
    cli_parser p;
    cli_parser_init(&p, NULL, argc - 1, argv + 1);
    const char *val;
    for (;;) {
        int o = cli_next(&p, opts, &val);
        if (o == CLI_ARG_END) {
            usage(stderr);
            return CLI_EXIT_USAGE;
        }
        if (o == OPT_HELP) {
            usage(stdout);
            return CLI_EXIT_OK;
        }
        if (o == OPT_VERSION)
            return cmd_version(0, NULL);
        if (o == OPT_LOAD) {
            if (!cli_load_format_file(val))
                return CLI_EXIT_USAGE;
            continue;
        }
        break; /* the subcommand */
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(val, commands[i].name))
            return commands[i].run(argc - 1 - p.next, argv + 1 + p.next);
    cli_usage_error(NULL, "'%s' is not a command", val);
}
