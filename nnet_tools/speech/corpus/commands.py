"""Spoken commands: a template grammar of ~1000 words in the spirit of Kaldi's RM task (naval
queries, "show the frigates in the gulf of mexico", beside assistant commands, "set the alarm for
seven thirty"), and the corpus plan drawn from it. A template is words and {slots}; a slot names
a list of templates; sentences are drawn from a seed. Split by speaker and by sentence: test
speakers and test sentences never occur in train, so the word LM (on the training transcripts)
meets new word orders and some words it never saw (the lexicon covers the whole vocabulary).
The plan's utterances are synth.py's (same fields, ``synth.plan``): synth.synthesise_job speaks them.
"""
import random
import re

from nnet_tools.errors import NnetError
from nnet_tools.speech.corpus import synth

_SLOT = re.compile(r"\{(\w+)\}")


def _split(text):
    return [line.strip() for line in text.strip().split("|")]


# --- the grammar ---------------------------------------------------------------------------------

SENTENCE = _split("""
{naval} | {naval} | {naval} | {home} | {assistant}
""")

NAVAL = _split("""
show the {ship_types} in the {sea} |
show me all {ship_types} within {distance} of {port} |
show the {ship_types} {status} in the {sea} |
what is the {attribute} of the {ship} |
what is the {attribute} of the {ship} in the {sea} |
give me the {attribute} of the {ship} |
how many {ship_types} are in the {sea} |
how many {ship_types} are {status} |
how many {ship_types} in the {fleet} fleet are {status} |
list the {ship_types} that are {status} |
list all {ship_types} in the {fleet} fleet |
list the {ship_types} that carry {equipment} |
is the {ship} {status} |
is the {ship} {status} in the {sea} |
are there any {ship_types} {status} near {port} |
when will the {ship} arrive at {port} |
when did the {ship} leave {port} |
which {ship_types} are {status} in the {sea} |
which {ship_types} carry {equipment} |
where is the {ship} |
where are the {ship_types} of the {fleet} fleet |
does the {ship} have {equipment} |
draw a chart of the {sea} |
zoom in on the {sea} |
redraw the chart centered on {port} |
send the {ship} to {port} |
move the {ship} to the {sea} |
order the {ship} to {naval_order} |
what is the nearest {ship_type} to the {ship} |
how long would it take the {ship} to reach {port} at {number} knots |
how far is the {ship} from {port} |
what {ship_types} are assigned to the {fleet} fleet |
which {ship_type} has the {superlative} {attribute} |
compare the {attribute} of the {ship} and the {ship} |
when was the {ship} last {status} |
display the track of the {ship} for the last {number} days
""")

HOME = _split("""
set the alarm for {time} |
set an alarm for {time} {day} |
wake me up at {time} {day} |
turn {onoff} the {device} in the {room} |
turn the {device} {onoff} |
turn {onoff} all the {device} |
set the {room} thermostat to {number} degrees |
dim the lights in the {room} |
make the {room} {warmer} |
lock the {door} |
unlock the {door} |
is the {door} locked |
play some {genre} music in the {room} |
play {genre} music |
play the next song |
turn the volume {updown} |
start the {device} |
stop the {device} in the {room} |
start a timer for {number} minutes |
cancel the timer |
open the {window_thing} in the {room} |
close the {window_thing} in the {room}
""")

ASSISTANT = _split("""
call {person} |
call {person} on {phone_kind} |
send a message to {person} saying {message} |
tell {person} {message} |
remind me to {task} {day} |
remind me to {task} at {time} |
add {item} to the shopping list |
add {item} and {item} to my list |
remove {item} from the shopping list |
what is the weather in {city} {day} |
will it rain in {city} {day} |
what is the temperature in {city} |
navigate to the nearest {place} |
find a {place} near {city} |
how far is it to {city} |
book a table for {number} at {time} |
schedule a meeting with {person} {day} at {time} |
cancel my {event} {day} |
move my {event} to {day} |
what time is it in {city} |
read my {messages} |
convert {number} {unit} to {unit} |
how many {unit} are in a {unit_singular} |
what is on my calendar {day} |
when is my next {event}
""")

SLOTS = {
    "naval": NAVAL, "home": HOME, "assistant": ASSISTANT,
    "ship": _split("""
enterprise | kennedy | nimitz | vinson | eisenhower | roosevelt | lincoln | washington | stennis |
truman | reagan | bush | ford | ranger | midway | saratoga | independence | constellation | america |
forrestal | intrepid | lexington | yorktown | hornet | wasp | essex | princeton | antietam |
ticonderoga | bunker hill | mobile bay | valley forge | shiloh | chosin | monterey | leyte gulf |
san jacinto | cowpens | gettysburg | normandy | anzio | vicksburg | hue city | philippine sea |
arleigh burke | barry | john paul jones | curtis wilbur | stout | mitscher | laboon | russell |
benfold | milius | decatur | higgins | hopper | chafee | pinckney | sterett |
dewey | halsey | preble | kidd | farragut | spruance | hewitt | fife | nicholas | vandegrift |
underwood | carr | gary | ingraham | simpson | jarrett | reuben james | doyle | boone | hawes |
taylor | kauffman | samuel roberts |
seawolf | connecticut | jimmy carter | virginia | texas | hawaii | missouri |
kitty hawk | coral sea | bataan | kearsarge | boxer | tarawa | peleliu | nassau | iwo jima |
guadalcanal | tripoli | okinawa | inchon | juneau | denver | dubuque | cleveland | austin |
mount whitney | blue ridge | sacramento | camden | seattle | detroit | supply | rainier | arctic |
yukon | pecos | laramie
"""),
    "ship_type": _split("""
carrier | cruiser | destroyer | frigate | submarine | tanker | oiler | minesweeper | tug |
patrol boat | supply ship | hospital ship | command ship | landing ship | tender
"""),
    "ship_types": _split("""
carriers | cruisers | destroyers | frigates | submarines | tankers | oilers | minesweepers | tugs |
patrol boats | supply ships | hospital ships | command ships | landing ships | tenders | ships |
vessels | warships | aircraft carriers | guided missile cruisers | attack submarines | amphibious ships
"""),
    "sea": _split("""
gulf of mexico | coral sea | indian ocean | arabian sea | north atlantic | south atlantic |
north pacific | south pacific | bering sea | sea of japan | mediterranean | caribbean |
persian gulf | gulf of alaska | red sea | black sea | baltic sea | north sea | philippine sea |
south china sea | east china sea | yellow sea | gulf of aden | bay of bengal | tasman sea |
norwegian sea | labrador sea | java sea | celebes sea | sulu sea | timor sea | arctic ocean |
southern ocean | adriatic | aegean | ionian sea | gulf of oman | strait of hormuz |
strait of gibraltar | english channel | panama canal | suez canal | sea of okhotsk |
gulf of guinea | mozambique channel | davis strait | denmark strait | bass strait |
tyrrhenian sea | ligurian sea | andaman sea | banda sea | gulf of thailand | gulf of california
"""),
    "port": _split("""
norfolk | san diego | pearl harbor | yokosuka | subic bay | guam | diego garcia | naples | rota |
bahrain | singapore | sydney | honolulu | seattle | charleston | mayport | bremerton | alameda |
long beach | boston | portsmouth | kiel | bergen | lisbon | marseille | athens | haifa | mombasa |
cape town | perth | manila | sasebo | busan | hong kong | wellington | auckland |
halifax | vancouver | anchorage | kodiak | adak | wake island | darwin | jakarta | colombo |
karachi | aden | djibouti | gibraltar | valletta | reykjavik | oslo | rotterdam | hamburg | brest |
toulon | souda bay | jeddah | muscat | chennai | mumbai | brisbane | hobart | suva | apra harbor
"""),
    "fleet": _split("""
first | second | third | fifth | sixth | seventh | pacific | atlantic | reserve | northern | southern
"""),
    "status": _split("""
on patrol | in port | under repair | at sea | refueling | underway | on station | overdue |
mission capable | not mission capable | conducting exercises | escorting convoys | in dry dock |
awaiting orders | low on fuel | on alert | returning home | deployed | in transit | standing by |
out of service | undergoing trials | anchored offshore | tracking a contact | damaged
"""),
    "attribute": _split("""
speed | heading | location | position | course | fuel level | fuel capacity | readiness |
home port | commanding officer | crew size | displacement | length | draft | maximum speed |
cruising range | radar | sonar | armament | missile inventory | last reported position |
arrival time | departure date | mission | status | casualty report | maintenance schedule |
next port of call | call sign | hull number | endurance | flag | destination | estimated arrival |
ammunition supply | training score | engine status | communications status
"""),
    "superlative": _split("""
highest | lowest | best | worst | greatest | longest | shortest | largest | smallest | fastest
"""),
    "equipment": _split("""
sonar | helicopters | cruise missiles | torpedoes | phased array radar | harpoon missiles |
tomahawk missiles | anti aircraft guns | mine countermeasures | a medical team |
satellite links | towed array sonar | fighter jets | landing craft | depth charges |
surveillance drones | electronic warfare gear | a diving team | marines | spare parts
"""),
    "naval_order": _split("""
return to port | hold position | increase speed | reduce speed | change course | refuel at sea |
join the convoy | patrol the {sea} | report its position | escort the {ship} |
rendezvous with the {ship} | proceed to {port} | stand by for orders | begin the exercise
"""),
    "distance": _split("""
{number} miles | {number} nautical miles | {number} kilometers | {number} hundred miles
"""),
    "number": _split("""
one | two | three | four | five | six | seven | eight | nine | ten | eleven | twelve | thirteen |
fourteen | fifteen | sixteen | seventeen | eighteen | nineteen | twenty | thirty | forty | fifty |
sixty | seventy | eighty | ninety | twenty five | thirty five | forty five | one hundred |
two hundred | five hundred | a thousand | zero
"""),
    "time": _split("""
{hour} | {hour} {minute} | {hour} in the morning | {hour} in the evening | {hour} at night |
noon | midnight | half past {hour} | quarter to {hour} | quarter past {hour} | {hour} sharp
"""),
    "hour": _split("""
one | two | three | four | five | six | seven | eight | nine | ten | eleven | twelve
"""),
    "minute": _split("""
fifteen | thirty | forty five | oh five | ten | twenty | fifty | oh nine
"""),
    "day": _split("""
today | tomorrow | tonight | this morning | this afternoon | this evening | on monday |
on tuesday | on wednesday | on thursday | on friday | on saturday | on sunday | next week |
on the {ordinal} of {month} | the day after tomorrow | next weekend
"""),
    "ordinal": _split("""
first | second | third | fourth | fifth | sixth | seventh | eighth | ninth | tenth | twelfth |
fifteenth | twentieth | thirtieth | twenty first
"""),
    "month": _split("""
january | february | march | april | may | june | july | august | september | october |
november | december
"""),
    "onoff": _split("on | off"),
    "updown": _split("up | down | all the way up | a little lower"),
    "warmer": _split("warmer | cooler | brighter | darker | quieter"),
    "device": _split("""
lights | lamp | fan | heater | air conditioner | television | radio | oven | dishwasher |
washing machine | dryer | coffee maker | kettle | sprinklers | porch light | humidifier |
speaker | computer | printer | vacuum cleaner | ceiling fan | stove | microwave | fireplace
"""),
    "room": _split("""
kitchen | living room | bedroom | bathroom | garage | office | hallway | basement | attic |
dining room | nursery | study | guest room | garden | patio | laundry room | cellar | porch
"""),
    "door": _split("front door | back door | garage door | side gate | kitchen door | car"),
    "window_thing": _split("window | windows | curtains | blinds | shutters | skylight"),
    "genre": _split("""
jazz | classical | rock | pop | country | blues | reggae | folk | hip hop | electronic | soul |
funk | gospel | opera | piano | dance | relaxing | christmas | punk | swing | metal
"""),
    "person": _split("""
john | mary | david | sarah | michael | emma | james | olivia | robert | sophia | william | anna |
thomas | laura | daniel | emily | peter | grace | paul | helen | mark | julia | steven | karen |
george | alice | edward | rachel | frank | nancy | henry | lucy | jack | claire | oliver | megan |
mom | dad | grandma | grandpa | the doctor | the office | the dentist | my sister | my brother |
my boss | the plumber | the school | uncle ben | aunt rose
"""),
    "phone_kind": _split("his cell phone | her cell phone | speaker | video | the home phone | the work phone"),
    "message": _split("""
i am running late | see you soon | call me back | happy birthday | dinner is ready | on my way |
the meeting is canceled | thanks for everything | i will be home at {time} | good night |
i love you | please pick up some {item} | where are you | the package arrived |
let us meet at the {place}
"""),
    "task": _split("""
buy {item} | call the doctor | water the plants | pay the rent | take out the trash |
feed the cat | walk the dog | pick up the kids | renew my passport | book the flight |
check the mail | charge my phone | clean the kitchen | send the report | call {person} |
finish the presentation | back up my files | pick up the dry cleaning | take my medicine |
return the library books | order more printer ink | schedule a haircut | fill up the car |
turn off the {device} | lock the {door} | wish {person} a happy birthday
"""),
    "item": _split("""
milk | eggs | bread | butter | cheese | apples | bananas | coffee | tea | rice | pasta | tomatoes |
onions | garlic | potatoes | carrots | chicken | salmon | yogurt | cereal | orange juice |
olive oil | flour | sugar | salt | pepper | honey | jam | peanut butter | lettuce | spinach |
broccoli | mushrooms | lemons | grapes | strawberries | blueberries | beans | lentils | soup |
crackers | cookies | chocolate | ice cream | toilet paper | dish soap | laundry detergent |
shampoo | toothpaste | batteries | light bulbs | paper towels | dog food | cat food | water |
sparkling water | wine | beer | avocados | cucumbers | oatmeal | almonds | tuna | bacon | sausages
"""),
    "city": _split("""
london | paris | berlin | madrid | rome | tokyo | chicago | denver | boston | seattle | miami |
atlanta | dallas | phoenix | toronto | montreal | dublin | edinburgh | amsterdam | brussels |
vienna | prague | warsaw | stockholm | copenhagen | helsinki | moscow | istanbul | cairo |
nairobi | lagos | johannesburg | delhi | bangkok | beijing | shanghai | seoul | sydney |
melbourne | mexico city | lima | santiago | buenos aires | rio | new york | los angeles |
san francisco | portland | austin | nashville | detroit | minneapolis | pittsburgh | baltimore
"""),
    "place": _split("""
gas station | pharmacy | hospital | supermarket | coffee shop | restaurant | bank | post office |
library | airport | train station | parking garage | hotel | gym | park | bakery |
hardware store | bookstore | museum | police station | cinema | school | beach | pizza place
"""),
    "event": _split("""
appointment | meeting | dentist appointment | dinner reservation | flight | haircut | lesson |
call | interview | party | class | game
"""),
    "messages": _split("messages | new messages | email | latest email | texts | notifications"),
    "unit": _split("""
miles | kilometers | pounds | kilograms | ounces | grams | feet | meters | inches | centimeters |
gallons | liters | cups | yards
"""),
    "unit_singular": _split("mile | kilometer | pound | kilogram | foot | meter | gallon | liter | yard | cup"),
}

_WORD = re.compile(r"^[a-z]+$")


def _check_grammar():
    """Every slot a template names exists, every word is lowercase a-z (what the lexicon's
    espeak-ng batch and Kaldi's tables take as they are)."""
    for name, options in [("sentence", SENTENCE)] + list(SLOTS.items()):
        for option in options:
            for slot in _SLOT.findall(option):
                if slot not in SLOTS:
                    raise NnetError(f"commands grammar: slot '{{{slot}}}' of {name} is not defined")
            for w in _SLOT.sub(" ", option).split():
                if not _WORD.match(w):
                    raise NnetError(f"commands grammar: word '{w}' of {name} is not lowercase a-z")


def vocabulary():
    """Every word the grammar can say, sorted (every slot is reachable from a sentence)."""
    _check_grammar()
    words = set()
    for options in [SENTENCE] + list(SLOTS.values()):
        for option in options:
            words.update(_SLOT.sub(" ", option).split())
    return sorted(words)


def sentence(rng, template=None):
    """One sentence (a list of words) drawn from the grammar with ``rng`` (random.Random)."""
    template = rng.choice(SENTENCE) if template is None else template
    out = []
    for k, part in enumerate(_SLOT.split(template)):
        if k % 2:  # a slot's name
            out += sentence(rng, rng.choice(SLOTS[part]))
        else:
            out += part.split()
    return out


def draw_sentences(rng, count, exclude=(), distinct=False, max_tries=100):
    """``count`` sentences (tuples of words), none in ``exclude``; all different with ``distinct``."""
    out, seen, tries = [], set(exclude), 0
    while len(out) < count:
        s = tuple(sentence(rng))
        if s in exclude or (distinct and s in seen):
            tries += 1
            if tries > max_tries * max(count, 1):
                raise NnetError(f"the commands grammar gives too few distinct sentences for {count} utterances")
            continue
        out.append(s)
        seen.add(s)
    return out


# --- the corpus plan -----------------------------------------------------------------------------

def make_plan(num_utts, num_speakers, test_fraction, seed, pause_prob=0.1):
    """Draw the corpus: {'train': [...], 'test': [...]} of synth.py's utterance dicts, split by
    speaker (test_fraction of the speakers) and by sentence (every test sentence is distinct and
    never a training sentence). Words run on without pauses, but after each word there is a
    pause of 100-300 ms with probability ``pause_prob`` (the optional silence of L.fst)."""
    if num_speakers < 2 or num_utts < num_speakers:
        raise NnetError(f"need at least 2 speakers and one utterance each "
                        f"(got --num-utts {num_utts}, --num-speakers {num_speakers})")
    if not 0.0 < test_fraction < 1.0:
        raise NnetError(f"--test-fraction must be in (0, 1), got {test_fraction}")
    chosen = synth.speakers(seed)[:num_speakers]
    num_test = min(num_speakers - 1, max(1, round(num_speakers * test_fraction)))
    counts = [num_utts // num_speakers + (1 if k < num_utts % num_speakers else 0) for k in range(num_speakers)]
    rng = random.Random(seed + 1)
    test_sentences = draw_sentences(rng, sum(counts[:num_test]), distinct=True)
    train_sentences = draw_sentences(rng, sum(counts[num_test:]), exclude=set(test_sentences))
    plan = {"train": [], "test": []}
    pools = {"test": iter(test_sentences), "train": iter(train_sentences)}
    for k, spk in enumerate(chosen):
        part = "test" if k < num_test else "train"
        sid = synth.speaker_id(spk)
        for i in range(counts[k]):
            words = list(next(pools[part]))
            plan[part].append({
                "id": f"{sid}-{i:05d}", "speaker": spk, "words": words,
                "gaps_ms": [rng.randint(100, 300) if rng.random() < pause_prob else 0 for _ in words[1:]],
                "lead_ms": rng.randint(100, 400), "trail_ms": rng.randint(100, 400),
                "snr_db": rng.uniform(25.0, 40.0), "seed": rng.randrange(2**31)})
    return plan


def split_summary(plan):
    """Figures of a plan: vocabulary sizes and the test words the training text never has."""
    train_words = {w for u in plan["train"] for w in u["words"]}
    test_tokens = [w for u in plan["test"] for w in u["words"]]
    unseen = [w for w in test_tokens if w not in train_words]
    return {"vocabulary": len(vocabulary()), "train_words": len(train_words),
            "test_words": len(set(test_tokens)), "test_only_words": len(set(unseen)),
            "test_tokens": len(test_tokens), "test_oov_tokens": len(unseen)}
