/*
 * test_version.c — the API version: the integer is the documented
 * function of its parts, the library reports the value the header says,
 * and this release is API 1.0.0.
 */
#include <check.h>
#include <stdlib.h>

#include "testutil.h"

START_TEST(api_version)
{
    ck_assert_int_eq(EMU_API_VERSION, EMU_API_VERSION_MAJOR * 10000 +
                                          EMU_API_VERSION_MINOR * 100 +
                                          EMU_API_VERSION_PATCH);
    ck_assert_int_lt(EMU_API_VERSION_MINOR, 100);
    ck_assert_int_lt(EMU_API_VERSION_PATCH, 100);
    ck_assert_int_eq(emu_api_version(), EMU_API_VERSION);
    ck_assert_int_ge(emu_api_version(), 10000); /* API 1.0 or later */
#if EMU_API_VERSION < 10000
#error "the API starts at 1.0.0"
#endif
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("version");
    TCase *tc = tcase_create("api");
    tcase_add_test(tc, api_version);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
