"""How jobs run, apart from what they do: the broker and its Redis (``broker``,
``redis_client``), sending a job from async code (``enqueue``), and in the worker process the
resources actors use (``resources``), the middleware around every job (``middleware``) and the
way an outage is logged (``outages``). The actors themselves are the other modules of jobs/."""
