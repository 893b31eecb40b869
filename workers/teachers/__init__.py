"""Teachers: frozen models that serve reference logits to a training — in the student's own process
(`frozen`: `FrozenModels`, `LocalTeachers`, the per-sample `LogitCache`) or as the plain class the
driver runs as a Ray actor (`actor`: `TeacherActor`, which holds the training split and rebuilds
each batch from its indices and augmentation draws)."""
