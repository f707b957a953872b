"""Job results: encoding a handler's return value (:mod:`.encode`), the handle that
enqueue returns (:mod:`.handle`), reading a finished job's outcome (:mod:`.outcome`) and
the one background waiter per app and database that turns NOTIFYs into results
(:mod:`.waiter`)."""
