/*
 * consumer — the smallest program that uses an installed libemu: the OCP
 * FP8 E4M3 format's constants and the rounding of a few values into it.
 * Built by tests/install_check.sh against a temporary install, through
 * pkg-config (Makefile) and through find_package (CMakeLists.txt).
 */
#include <stdio.h>

#include <emu/emu.h>

int main(void)
{
    const emu_format *f = emu_format_find("e4m3");
    if (!f) {
        fprintf(stderr, "consumer: no format e4m3\n");
        return 1;
    }
    /* The header this program was compiled with against the library it
     * runs with (the shared one, in the install check). */
    if (emu_api_version() / 10000 != EMU_API_VERSION / 10000 ||
        emu_api_version() < EMU_API_VERSION) {
        fprintf(stderr, "consumer: built for libemu API %d, runs with %d\n",
                EMU_API_VERSION, emu_api_version());
        return 1;
    }
    printf("libemu %s\n", EMU_VERSION_STRING);
    printf("API %d\n", emu_api_version());
    printf("%s: p = %d, emin = %d, emax = %d, max = %g, min subnormal = %a\n",
           f->name, f->p, f->emin, f->emax, f->max, f->min_subnormal);

    const double x[] = { 0.1, 1.0 / 3.0, 300.0, 460.0, 500.0, 1e-3, -5e-4 };
    const emu_rounding rne = { 0 };   /* nearest-even, tininess after */
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) {
        emu_status st;
        char flags[96];
        double y = emu_round(f, x[i], &rne, &st);
        emu_flags_string(st.flags, flags, sizeof flags);
        printf("rne(%g) = %g  [%s]\n", x[i], y, flags);
    }
    return 0;
}
