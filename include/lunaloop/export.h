/*
** lunaloop/export.h: the one export macro. Every public function is declared
** with LUNA_API; everything else is built with hidden visibility.
*/
#ifndef LUNALOOP_EXPORT_H
#define LUNALOOP_EXPORT_H

#if defined(_WIN32)
#  if defined(LUNA_BUILDING)
#    define LUNA_API __declspec(dllexport)
#  else
#    define LUNA_API
#  endif
#elif defined(__GNUC__)
#  define LUNA_API __attribute__((visibility("default")))
#else
#  define LUNA_API
#endif

#ifdef __cplusplus
#  define LUNA_BEGIN_DECLS extern "C" {
#  define LUNA_END_DECLS }
#else
#  define LUNA_BEGIN_DECLS
#  define LUNA_END_DECLS
#endif

#endif
