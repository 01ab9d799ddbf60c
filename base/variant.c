/* variant.c: the variant grammar over the mode table's profiles (see variant.h). */
#include "variant.h"

#include <stdio.h>
#include <string.h>

/* The separator of MODE@PROFILE. */
#define VARIANT_SEP '@'

pg_status variant_profile_find(const char *name, variant_profile_id *out, pg_err *err)
{
    const char *at = strchr(name, VARIANT_SEP);
    for (int i = 0; i < VARIANT_PROFILE_COUNT; i++) {
        const variant_profile_id id = (variant_profile_id)i;
        if (strcmp(name, variant_profile_name(id)) == 0 ||
            (at == NULL && variant_profile_is_default(id) &&
             strcmp(name, pg_mode_name(variant_profile_mode(id))) == 0)) {
            *out = (variant_profile_id)i;
            return PG_OK;
        }
    }
    char choices[VARIANT_CHOICES_MAX];
    size_t used = 0;
    for (int i = 0; i < VARIANT_PROFILE_COUNT && used < sizeof choices; i++) {
        int w = snprintf(choices + used, sizeof choices - used, "%s%s", i ? ", " : "",
                         variant_profile_name((variant_profile_id)i));
        if (w > 0) used += (size_t)w;
    }
    char modes[VARIANT_CHOICES_MAX / 2];
    size_t mused = 0;
    for (int m = 0; m < PG_MODE_COUNT && mused < sizeof modes; m++) {
        int w = snprintf(modes + mused, sizeof modes - mused, "%s%s", m ? ", " : "",
                         pg_mode_name((pg_mode)m));
        if (w > 0) mused += (size_t)w;
    }
    return pg_fail(err, PG_ERR_USAGE, "variant '%s' is not one of %s (or %s for the defaults)",
                   name, choices, modes);
}

/* Whether v (len bytes) ends in the ~spec suffix, leaving room for a name. */
static int has_spec_suffix(const char *v, size_t len)
{
    const size_t ns = strlen(VARIANT_SPEC_SUFFIX);
    return len > ns && strcmp(v + len - ns, VARIANT_SPEC_SUFFIX) == 0;
}

/* Whether v starts with the ext: prefix. */
static int has_ext_prefix(const char *v)
{
    return strncmp(v, VARIANT_EXT_PREFIX, strlen(VARIANT_EXT_PREFIX)) == 0;
}

/* The profile named (in full, or as a bare mode) by text, or VARIANT_PROFILE_COUNT. */
static variant_profile_id find_profile(const char *text)
{
    variant_profile_id id = VARIANT_PROFILE_COUNT;
    pg_err ignored = {0};
    return variant_profile_find(text, &id, &ignored) == PG_OK ? id : VARIANT_PROFILE_COUNT;
}

const char *variant_name_profile_choices(void)
{
    static char text[VARIANT_CHOICES_MAX];
    if (text[0] != '\0') return text;
    size_t at = 0;
    char bare[VARIANT_CHOICES_MAX] = "";
    size_t bat = 0;
    for (int i = 0; i < VARIANT_PROFILE_COUNT && at < sizeof text; i++) {
        const char *name = variant_profile_name((variant_profile_id)i);
        at += (size_t)snprintf(text + at, sizeof text - at, "%s%s", i ? ", " : "", name);
        const char *sep = strchr(name, VARIANT_SEP);
        if (sep != NULL && variant_profile_is_default((variant_profile_id)i) && bat < sizeof bare)
            bat += (size_t)snprintf(bare + bat, sizeof bare - bat, "%s%.*s = %s",
                                    bat ? ", " : "", (int)(sep - name), name, name);
    }
    if (at < sizeof text)
        snprintf(text + at, sizeof text - at, "; a mode alone is its default profile (%s)",
                 bare);
    return text;
}

const char *variant_name_choices(void)
{
    static char text[VARIANT_CHOICES_MAX + 32];
    if (text[0] == '\0')
        snprintf(text, sizeof text, "%s; PROFILE" VARIANT_SPEC_SUFFIX "; " VARIANT_EXT_PREFIX
                 "NAME", variant_name_profile_choices());
    return text;
}

pg_status variant_name_parse(const char *what, const char *text, variant_name *out,
                             pg_err *err)
{
    const size_t len = text != NULL ? strlen(text) : 0;
    *out = (variant_name){.profile = VARIANT_PROFILE_COUNT};
    if (text != NULL && len < sizeof out->full) {
        if (has_ext_prefix(text)) {
            if (len > strlen(VARIANT_EXT_PREFIX)) {
                out->kind = VARIANT_EXT;
                snprintf(out->full, sizeof out->full, "%s", text);
                return PG_OK;
            }
        } else {
            char base[VARIANT_NAME_MAX];
            const int spec = has_spec_suffix(text, len);
            snprintf(base, sizeof base, "%.*s",
                     (int)(spec ? len - strlen(VARIANT_SPEC_SUFFIX) : len), text);
            const variant_profile_id p = find_profile(base);
            if (p != VARIANT_PROFILE_COUNT) {
                out->kind = spec ? VARIANT_SPEC : VARIANT_PROFILE;
                out->profile = p;
                snprintf(out->full, sizeof out->full, "%s%s", variant_profile_name(p),
                         spec ? VARIANT_SPEC_SUFFIX : "");
                return PG_OK;
            }
        }
    }
    return pg_fail(err, PG_ERR_USAGE, "%s: '%s' is not a variant (one of %s)", what,
                   text != NULL ? text : "", variant_name_choices());
}

void variant_name_spec(variant_profile_id id, char *out, size_t len)
{
    snprintf(out, len, "%s%s", variant_profile_name(id), VARIANT_SPEC_SUFFIX);
}

void variant_name_ext(const char *name, char *out, size_t len)
{
    snprintf(out, len, "%s%s", VARIANT_EXT_PREFIX, name);
}

int variant_name_is_spec(const char *v)
{
    return v != NULL && !has_ext_prefix(v) && has_spec_suffix(v, strlen(v));
}

const char *variant_name_ext_name(const char *v)
{
    return v != NULL && has_ext_prefix(v) ? v + strlen(VARIANT_EXT_PREFIX) : NULL;
}

variant_profile_id variant_name_profile(const char *v)
{
    if (v == NULL || has_ext_prefix(v) || variant_name_is_spec(v)) return VARIANT_PROFILE_COUNT;
    return find_profile(v);
}

int variant_name_cmp(const char *a, const char *b)
{
    const variant_profile_id ra = variant_name_profile(a), rb = variant_name_profile(b);
    if (ra != rb) return ra < rb ? -1 : 1;
    if (a == NULL || b == NULL) return (a == NULL) - (b == NULL);
    return strcmp(a, b);
}
