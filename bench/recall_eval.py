"""A relevance evaluation for recall: one owner's multi-session conversation and questions about it.

Dana talks to her assistant over ten sessions in 2026. Each question is asked the way a model asks
`memory_recall` (a natural-language question, not keywords) and names the messages that answer it by
tag. recall@k is the share of questions with at least one answering message in the first k results.
`load()` writes the conversation as messages of one conversation (agent `main`, owner `dana`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

AGENT, OWNER, CHANNEL, CHAT = "main", "dana", "telegram", "dana"

# (session start, [(tag or "", role, text), ...])
SESSIONS = [
    ("2026-01-08 19:02", [
        ("", "user", "Hi! New year, new me. I want to keep track of a few things this year."),
        ("", "assistant", "Happy new year! Tell me what you'd like to keep track of and I'll remember it."),
        ("job", "user", "I work as a data analyst at Harrow & Finch, mostly building sales dashboards."),
        ("", "assistant", "Noted: data analyst at Harrow & Finch, sales dashboards."),
        ("manager", "user", "My manager Priya wants me to move into forecasting work by summer."),
        ("", "assistant", "Forecasting is a great next step. Do you want reading suggestions?"),
        ("resolution", "user", "Sure. Also my resolution is to run a half marathon in October, the Leeds one."),
        ("resolution_ack", "assistant", "A half marathon in October gives you about nine months to train. Exciting!"),
    ]),
    ("2026-01-21 08:15", [
        ("dog", "user", "Biscuit chewed my running shoes this morning, that dog is a menace."),
        ("", "assistant", "Oh no! How old is Biscuit?"),
        ("dog_age", "user", "He's a two year old beagle, we adopted him from the rescue in Otley."),
        ("", "assistant", "Beagles do love to chew. Maybe some sturdy chew toys would help."),
        ("shoes", "user", "I ordered new shoes, Brooks Ghost size 6, should arrive Friday."),
    ]),
    ("2026-02-03 21:40", [
        ("pottery_plan", "user", "I'm thinking of taking up something creative, maybe ceramics."),
        ("", "assistant", "Ceramics is very relaxing. There are wheel-throwing courses for beginners."),
        ("pottery_start", "user",
         "Booked it! I start the beginners pottery class at Clayworks studio on 5 March, Thursday evenings."),
        ("", "assistant", "Wonderful, Thursday evenings at Clayworks from 5 March. Enjoy getting your hands muddy."),
        ("pottery_cost", "user", "It was 180 pounds for ten weeks, clay and firing included."),
    ]),
    ("2026-02-19 12:30", [
        ("allergy", "user",
         "Went to the GP today. Reminder for future me: I'm allergic to penicillin, it gives me hives."),
        ("", "assistant", "Important to know. I'll remember the penicillin allergy."),
        ("gp_result", "user", "They gave me clarithromycin instead for the chest infection."),
        ("", "assistant", "I hope you feel better soon. Rest and fluids."),
        ("sister", "user", "My sister Maya is coming up from Bristol to look after me this weekend."),
        ("", "assistant", "That's kind of her. Is Maya your older or younger sister?"),
        ("sister_age", "user", "Younger, she's 27 and a midwife at Southmead hospital."),
    ]),
    ("2026-03-12 22:05", [
        ("pottery_first", "user", "First two pottery sessions done. My bowls keep collapsing on the wheel!"),
        ("", "assistant", "Collapsing usually means too much water or uneven walls. It gets easier with practice."),
        ("teacher", "user", "Our teacher Rosa says I centre the clay too fast. She's brilliant."),
        ("", "assistant", "Rosa sounds great. Slow and steady centring is the key skill."),
        ("mug", "user", "I finally made a mug that stands up. Glazing it blue next week."),
    ]),
    ("2026-04-02 18:20", [
        ("training", "user", "Training update: I ran 14 km on Sunday, longest run ever."),
        ("", "assistant", "14 km is a big milestone. How did your legs feel?"),
        ("knee", "user", "Left knee hurt a bit after, the physio said it's runner's knee and to do squats."),
        ("", "assistant", "Strength work helps a lot with runner's knee. Don't skip the squats."),
        ("plan", "user", "My plan is three runs a week: intervals Tuesday, easy Thursday, long run Sunday."),
        ("work_news", "user", "Also Priya told me I'm getting the forecasting project from May. Nervous but happy."),
        ("", "assistant", "Congratulations on the forecasting project!"),
    ]),
    ("2026-05-15 20:45", [
        ("move_plan", "user", "We're moving flat in June, to Chapel Allerton. Packing is chaos."),
        ("", "assistant", "Moving is stressful. When is the moving day?"),
        ("move_date", "user", "The van comes on Saturday 13 June. The new place has a garden for Biscuit."),
        ("", "assistant", "A garden is perfect for a beagle."),
        ("partner", "user", "Sam is handling the broadband and council tax, I'm doing the packing."),
        ("", "assistant", "Good division of labour. Is Sam your partner?"),
        ("partner_who", "user",
         "Yes, Sam and I have been together five years. Sam is a secondary school chemistry teacher."),
    ]),
    ("2026-06-28 10:10", [
        ("moved", "user", "We're in! The new flat in Chapel Allerton is lovely, Biscuit loves the garden."),
        ("", "assistant", "Congratulations on the move!"),
        ("bike", "user", "Bad news though, my bike got stolen from outside the station on Friday."),
        ("", "assistant", "I'm sorry. Did you report it to the police?"),
        ("bike_report", "user", "Yes, crime reference 4471 2026. It was a green Trek hybrid, insured thankfully."),
        ("tea", "user", "Unpacked the kitchen. Found my stash of genmaicha, my favourite tea."),
        ("", "assistant", "Genmaicha, the one with roasted rice. Good choice."),
        ("portuguese", "user", "I've started learning Portuguese on Duolingo for Tom's wedding."),
        ("", "assistant", "Nice. Where is the wedding?"),
        ("wedding", "user", "Tom is getting married in Porto on 19 September. I'm giving a reading."),
    ]),
    ("2026-08-16 17:30", [
        ("birthday", "user", "It was my birthday on Friday, 14 August. Sam got me a pottery wheel of my own!"),
        ("", "assistant", "Happy belated birthday! A wheel at home, you'll be unstoppable."),
        ("vegetarian", "user", "We went to Ottolenghi for dinner. I've been vegetarian since 2019 so it's perfect."),
        ("", "assistant", "Sounds like a lovely birthday dinner."),
        ("book_club", "user", "Book club is reading Piranesi this month, I'm hosting on the 27th."),
        ("", "assistant", "Piranesi is wonderful. Are you enjoying it?"),
        ("book_opinion", "user", "Loving it, the house with the tides and statues is so strange and beautiful."),
        ("race_pace", "user",
         "Running is going well, 10 km in 52 minutes last week, aiming for under two hours in October."),
    ]),
    ("2026-10-05 09:00", [
        ("race_done", "user", "I did it! Finished the Leeds half marathon yesterday in 1:54:12."),
        ("", "assistant", "Amazing! Under two hours, just as you planned. Congratulations!"),
        ("race_after", "user", "Knee held up fine. Maya came to cheer with a sign with Biscuit's face on it."),
        ("", "assistant", "That's adorable. What's next?"),
        ("next_goal", "user", "Next goal: the York marathon next October. Scary."),
        ("porto", "user", "Porto was gorgeous. My reading at Tom's wedding went fine, I only cried a little."),
        ("", "assistant", "I'm glad it went well."),
        ("promotion", "user", "And work news: I got promoted to senior analyst on the forecasting team."),
        ("", "assistant", "Congratulations, Dana! Well deserved."),
        ("car", "user", "We're selling the old 2014 Honda Jazz and getting an electric car, probably a Kia Niro."),
    ]),
]

# (question, tags of the messages that answer it)
QUESTIONS = [
    ("when did she start the pottery class?", ["pottery_start"]),
    ("Where does Dana work?", ["job"]),
    ("who is her manager?", ["manager", "work_news"]),
    ("which race was she training for?", ["resolution", "resolution_ack", "race_done"]),
    ("what is the name of her dog?", ["dog", "dog_age"]),
    ("what breed is Biscuit?", ["dog_age"]),
    ("what size running shoes does she wear?", ["shoes"]),
    ("how much did the pottery course cost?", ["pottery_cost"]),
    ("is she allergic to any medication?", ["allergy"]),
    ("what antibiotic did the GP give her?", ["gp_result"]),
    ("where does her sister Maya live?", ["sister"]),
    ("what does Maya do for a living?", ["sister_age"]),
    ("who teaches her pottery?", ["teacher"]),
    ("what colour did she glaze the mug?", ["mug"]),
    ("what was her longest run?", ["training"]),
    ("what did the physio say about her knee?", ["knee"]),
    ("what is her weekly running plan?", ["plan"]),
    ("when does the forecasting project start?", ["work_news"]),
    ("when is the moving day?", ["move_date"]),
    ("which neighbourhood did they move to?", ["move_plan", "moved"]),
    ("what does Sam do?", ["partner_who"]),
    ("how long have Dana and Sam been together?", ["partner_who"]),
    ("what happened to her bike?", ["bike"]),
    ("what was the crime reference number?", ["bike_report"]),
    ("what is her favourite tea?", ["tea"]),
    ("why is she learning Portuguese?", ["portuguese"]),
    ("when and where is Tom's wedding?", ["wedding"]),
    ("when is Dana's birthday?", ["birthday"]),
    ("what did Sam give her for her birthday?", ["birthday"]),
    ("is she vegetarian?", ["vegetarian"]),
    ("which book is the book club reading?", ["book_club"]),
    ("what did she think of Piranesi?", ["book_opinion"]),
    ("what was her finish time in the half marathon?", ["race_done"]),
    ("who came to cheer at the race?", ["race_after"]),
    ("what is her next running goal?", ["next_goal"]),
    ("how did the reading at the wedding go?", ["porto"]),
    ("what is her new job title?", ["promotion"]),
    ("what car are they getting?", ["car"]),
    ('"Honda Jazz"', ["car"]),
    ("Clayworks", ["pottery_start"]),
]


def messages() -> list[tuple[str, str, str, datetime]]:
    """(tag, role, text, time) in order; messages of a session are two minutes apart."""
    out = []
    for start, turns in SESSIONS:
        at = datetime.strptime(start, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
        for i, (tag, role, text) in enumerate(turns):
            out.append((tag, role, text, at + timedelta(minutes=2 * i)))
    return out


def recall_at(results: list[list[int]], answers: list[set[int]], k: int = 10) -> float:
    """Share of questions with an answering id among their first k results."""
    hits = sum(1 for found, want in zip(results, answers, strict=True) if want & set(found[:k]))
    return hits / len(answers)
