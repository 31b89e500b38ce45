"""What a step costs: the linear engine model (:mod:`.linear`), the roofline
(:mod:`.roofline`, :mod:`.roofline_profile`), the catalog of models (:mod:`.models`: a
model's architecture, its presets and its ``config.json``), GPUs (:mod:`.gpus`) and serving
software (:mod:`.software`) with its lookup (:mod:`.catalog`), and fitting either model to
measured steps (:mod:`.fit`, :mod:`.fit_roofline`)."""
