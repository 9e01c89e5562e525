/*
** lunaloop.h: the umbrella header of lunaloop, an embeddable task scheduler
** for game-style frame loops. Include this one; it includes the module
** headers. The Lua binding is in lunaloop_lua.h.
*/
#ifndef LUNALOOP_H
#define LUNALOOP_H

#include "lunaloop/version.h"
#include "lunaloop/export.h"
#include "lunaloop/error.h"
#include "lunaloop/timing.h"
#include "lunaloop/loop.h"
#include "lunaloop/driver.h"
#include "lunaloop/sim.h"

#endif
