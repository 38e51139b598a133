/*
 * cmd_weights.c — `emu weights show FILE`: what a weights file (the
 * safetensors layout of emu/tensorfile.h) holds: its metadata, then per
 * tensor its name, dtype, shape and the smallest, largest and mean value.
 *
 * The file is checked as `emu train --init-from` checks it, except that
 * non-finite values are counted (a column) rather than refused: a
 * diverged run's weights can be looked at.
 */
#include "cli.h"

#include <math.h>
#include <string.h>

static void help(void)
{
    printf(
        "Usage: emu weights show FILE\n"
        "\n"
        "Lists the tensors of a weights file (safetensors layout: what\n"
        "emu train --export and every run's weights.safetensors hold, and\n"
        "what --init-from reads): its metadata, then per tensor the name,\n"
        "dtype, shape, and the minimum, maximum and mean of its finite\n"
        "values, with the count of non-finite ones.  The file is checked\n"
        "strictly; a damaged one is refused naming the tensor and field.\n"
        "\n"
        "Example: emu weights show runs/latest/weights.safetensors\n");
}

static void shape_text(char *buf, size_t size, const emu_tf_tensor *t)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int k = 0; k < t->ndim && n < size; k++)
        n += (size_t)snprintf(buf + n, size - n, "%s%zu", k ? "," : "", t->shape[k]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

static int show(const char *path)
{
    emu_tensorfile tf;
    emu_error err;
    if (emu_tensorfile_read(&tf, path, EMU_TF_ALLOW_NONFINITE, &err)) {
        char msg[700];
        emu_error_format(&err, msg, sizeof msg);
        cli_error("weights", "%s", msg);
        return CLI_EXIT_USAGE;
    }
    printf("# %s: %d tensors\n", path, tf.count);
    for (int i = 0; i < tf.meta_count; i++)
        printf("# %s: %s\n", tf.meta_keys[i], tf.meta_values[i]);
    int wname = 4;
    for (int i = 0; i < tf.count; i++) {
        int l = (int)strlen(tf.tensors[i].name);
        if (l > wname)
            wname = l;
    }
    size_t total = 0;
    printf("%-*s  %-5s %-18s %10s %13s %13s %13s %9s\n", wname, "name", "dtype",
           "shape", "elements", "min", "max", "mean", "nonfinite");
    for (int i = 0; i < tf.count; i++) {
        const emu_tf_tensor *t = &tf.tensors[i];
        double lo = INFINITY, hi = -INFINITY, sum = 0.0;
        size_t finite = 0;
        for (size_t j = 0; j < t->n; j++) {
            double v = t->values[j];
            if (!isfinite(v))
                continue;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
            sum += v;
            finite++;
        }
        char shape[128], a[32] = "-", b[32] = "-", c[32] = "-";
        shape_text(shape, sizeof shape, t);
        if (finite) {
            snprintf(a, sizeof a, "%.6g", lo);
            snprintf(b, sizeof b, "%.6g", hi);
            snprintf(c, sizeof c, "%.6g", sum / (double)finite);
        }
        printf("%-*s  %-5s %-18s %10zu %13s %13s %13s %9zu\n", wname, t->name,
               emu_tf_dtype_name(t->dtype), shape, t->n, a, b, c, t->nonfinite);
        total += t->n;
    }
    printf("# %zu values\n", total);
    emu_tensorfile_free(&tf);
    return cli_stdout_status("weights");
}

int cmd_weights(int argc, char **argv)
{
    static const cli_opt opts[] = { { "help", 'h', false }, { NULL, 0, false } };
    cli_parser p;
    cli_parser_init(&p, "weights", argc, argv);
    const char *val, *verb = NULL, *file = NULL;
    for (int o; (o = cli_next(&p, opts, &val)) != CLI_ARG_END;) {
        if (o == 0) {
            help();
            return CLI_EXIT_OK;
        }
        if (!verb)
            verb = val;
        else if (!file)
            file = val;
        else
            cli_usage_error("weights", "unexpected argument '%s'", val);
    }
    if (!verb)
        cli_usage_error("weights", "expected a verb: show FILE");
    if (strcmp(verb, "show"))
        cli_usage_error("weights", "'%s' is not a verb of emu weights (show)", verb);
    if (!file)
        cli_usage_error("weights", "show: expected a FILE");
    return show(file);
}
