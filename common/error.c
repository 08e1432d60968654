/* dcps — the error table's lookups. */
#include "common/error.h"

#include <stddef.h>

struct row {
    int code;
    const char *name;
    const char *msg;
};

static const struct row rows[] = {
#define DCPS_ERR_ROW(name, value, msg) {(value), #name, (msg)},
    DCPS_ERRORS(DCPS_ERR_ROW)
#undef DCPS_ERR_ROW
};

static const struct row *find(int code)
{
    if (code > 0)
        code = -code;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i].code == code)
            return &rows[i];
    return NULL;
}

const char *dcps_strerror(int code)
{
    const struct row *r = find(code);
    return r ? r->msg : "unknown error";
}

const char *dcps_errname(int code)
{
    const struct row *r = find(code);
    return r ? r->name : "UNKNOWN";
}

int dcps_error_known(int code)
{
    return find(code) != NULL;
}
