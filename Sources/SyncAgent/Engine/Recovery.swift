import SyncAgentCore

/// What a start does with the log it replayed (SPEC §6): tasks the last
/// agent left running (a crash) or paused on its way out go back to the
/// queue at the offset the log vouches for, no further; what a crash cut
/// short of a task's end (a rename the log vouches for) is finished. Each
/// kind says what that means for its tasks (`TaskRunner.recover`).
enum Recovery {
    static func resumeInterruptedTasks(in context: RunnerContext) {
        let tasks = context.state.orderedTasks
        for index in tasks.indices {
            // Read in place, copying no task: most tasks of a long log ended long ago and need one look at most.
            let phase = tasks[index].phase
            if phase == .queued || phase == .failed { continue }
            let kind = Kinds.runnerType(for: tasks[index].spec)
            if phase.isEnded {
                kind.tidyAfterRestart(tasks[index], in: context)
                continue
            }
            let task = tasks[index]
            // Tasks that waited for the network look again with this agent's network.
            let interrupted = task.phase == .running
                || (task.phase == .paused && (task.pauseReason == .agentStopping || task.pauseReason?.waitsForNetwork == true))
            guard interrupted else { continue }
            // Its partial file is cut back to the log's offset below: only where the rules allow.
            if context.failIfRefused(task) { continue }
            let offset = kind.recover(task, in: context)
            let reason = task.phase == .running ? "agent restarted after an unclean stop" : "agent restarted"
            context.record(.resumed(Resumed(bytes: offset, reason: reason)), task: task.id)
            context.logger.info("task resumed", metadata: ["task.id": "\(task.id)", "offset": "\(offset)"])
        }
    }
}
