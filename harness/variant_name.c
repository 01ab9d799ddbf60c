/* variant_name.c: the grammar of variant names (see variant_name.h). */
#include "variant_name.h"

#include <stdio.h>
#include <string.h>

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

/* The profile named (in full, or as a bare mode) by text, or NULL. */
static const attn_profile *find_profile(const char *text)
{
    const attn_profile *p = NULL;
    pg_err ignored = {0};
    return attn_profile_find(text, &p, &ignored) == PG_OK ? p : NULL;
}

const char *variant_name_profile_choices(void)
{
    static char text[VARIANT_CHOICES_MAX];
    if (text[0] != '\0') return text;
    size_t at = 0;
    char bare[VARIANT_CHOICES_MAX] = "";
    size_t bat = 0;
    for (size_t i = 0; i < attn_profile_count() && at < sizeof text; i++) {
        const attn_profile *p = attn_profile_at(i);
        const char *name = attn_profile_variant(p);
        at += (size_t)snprintf(text + at, sizeof text - at, "%s%s", i ? ", " : "", name);
        const char *sep = strchr(name, '@');
        if (sep != NULL && attn_profile_is_default(p) && bat < sizeof bare)
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
    *out = (variant_name){0};
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
            const attn_profile *p = find_profile(base);
            if (p != NULL) {
                out->kind = spec ? VARIANT_SPEC : VARIANT_PROFILE;
                out->profile = p;
                snprintf(out->full, sizeof out->full, "%s%s", attn_profile_variant(p),
                         spec ? VARIANT_SPEC_SUFFIX : "");
                return PG_OK;
            }
        }
    }
    return pg_fail(err, PG_ERR_USAGE, "%s: '%s' is not a variant (one of %s)", what,
                   text != NULL ? text : "", variant_name_choices());
}

void variant_name_spec(const attn_profile *p, char *out, size_t len)
{
    snprintf(out, len, "%s%s", attn_profile_variant(p), VARIANT_SPEC_SUFFIX);
}

void variant_name_ext(const char *name, char *out, size_t len)
{
    snprintf(out, len, "%s%s", VARIANT_EXT_PREFIX, name);
}

int variant_name_is_spec(const char *v)
{
    return v != NULL && !has_ext_prefix(v) && has_spec_suffix(v, strlen(v));
}

const attn_profile *variant_name_profile(const char *v)
{
    if (v == NULL || has_ext_prefix(v) || variant_name_is_spec(v)) return NULL;
    return find_profile(v);
}

size_t variant_name_rank(const char *v)
{
    const attn_profile *p = variant_name_profile(v);
    for (size_t i = 0; p != NULL && i < attn_profile_count(); i++)
        if (attn_profile_at(i) == p) return i;
    return attn_profile_count();
}

int variant_name_cmp(const char *a, const char *b)
{
    const size_t ra = variant_name_rank(a), rb = variant_name_rank(b);
    if (ra != rb) return ra < rb ? -1 : 1;
    if (a == NULL || b == NULL) return (a == NULL) - (b == NULL);
    return strcmp(a, b);
}
