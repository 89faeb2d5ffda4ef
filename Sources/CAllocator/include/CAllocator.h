#ifndef CAREVAULT_ALLOCATOR_H
#define CAREVAULT_ALLOCATOR_H

/// Caps the C allocator's arenas at `count` (glibc's M_ARENA_MAX), unless MALLOC_ARENA_MAX is set in the
/// environment, which then decides. Call it first thing in a process, before its threads allocate.
/// Returns 1 when the cap was set, 0 when it was left alone (another C library, or the environment's).
int carevault_limit_malloc_arenas(int count);

#endif
