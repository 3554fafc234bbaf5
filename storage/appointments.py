"""An appointment about to change: the one way to read it for a change.

Every door that changes a booking (the agent's reschedule and cancel tools, a reminder's tap,
a staff move, the business's cancel) reads it here, locked until its transaction ends (FOR
UPDATE on PostgreSQL; SQLite's transactions are serial already) and read again from the
database, so two changes racing for one booking see each other: one wins, the other finds
it no longer upcoming.
"""

from sqlmodel import Session, select

from storage.models import Appointment


def locked(session: Session, appointment_id: int) -> Appointment | None:
    """Appointment `appointment_id`, locked and fresh; None when there is none."""
    return session.exec(select(Appointment).where(Appointment.id == appointment_id)
                        .with_for_update()
                        .execution_options(populate_existing=True)).first()
