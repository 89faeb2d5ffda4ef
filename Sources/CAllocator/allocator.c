#include <stdlib.h>
#include "CAllocator.h"
#if defined(__GLIBC__)
#include <malloc.h>
#endif

int carevault_limit_malloc_arenas(int count) {
#if defined(__GLIBC__) && defined(M_ARENA_MAX)
    if (getenv("MALLOC_ARENA_MAX") != NULL) return 0;
    return mallopt(M_ARENA_MAX, count) == 1 ? 1 : 0;
#else
    (void)count;
    return 0;
#endif
}
